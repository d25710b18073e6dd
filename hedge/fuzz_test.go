package hedge_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/watertight/watertight/hedge"
)

// FuzzConfig builds a Config from fuzzed fields and checks that
// New never panics and returns an error, naming the first invalid
// field by the documented rules, exactly when one is invalid; a valid Hedge
// reports the delay the rules give and runs a call that succeeds.
func FuzzConfig(f *testing.F) {
	ms := int64(time.Millisecond)
	f.Add(0, int64(0), 0.0)
	f.Add(1, 15*ms, 0.0)
	f.Add(3, 5*ms, 0.9)
	f.Add(-1, -ms, math.NaN())
	f.Add(101, int64(math.MaxInt64), 1.0)
	f.Fuzz(func(t *testing.T, maxHedges int, delay int64, quantile float64) {
		cfg := hedge.Config{MaxHedges: maxHedges, Delay: time.Duration(delay), Quantile: quantile}
		mh, q := maxHedges, quantile
		if mh == 0 {
			mh = 1
		}
		if q == 0 && delay == 0 {
			q = 0.9
		}
		want := ""
		switch {
		case mh < 1 || mh > 100:
			want = "MaxHedges"
		case delay < 0:
			want = "Delay"
		case q != 0 && !(q > 0 && q < 1):
			want = "Quantile"
		}
		h, err := hedge.New(cfg)
		if want != "" {
			if err == nil || !strings.HasPrefix(err.Error(), "hedge: Config."+want+" ") {
				t.Fatalf("New(%+v) = %v; want an error naming %s", cfg, err, want)
			}
			return
		}
		if err != nil {
			t.Fatalf("New(%+v) = %v; want valid", cfg, err)
		}
		wantDelay := time.Duration(delay)
		if q != 0 && delay == 0 {
			wantDelay = -1
		}
		if d, m := hedge.Settings(h); d != wantDelay || m != mh {
			t.Fatalf("delay = %v, MaxHedges = %d; want %v, %d", d, m, wantDelay, mh)
		}
		if _, err := hedge.Do(context.Background(), h, nil, func(context.Context) (int, error) { return 1, nil }); err != nil {
			t.Fatalf("Do = %v", err)
		}
	})
}

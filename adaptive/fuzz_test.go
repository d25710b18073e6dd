package adaptive_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/watertight/watertight/adaptive"
)

// FuzzConfig builds a Config from fuzzed fields and checks that New never
// panics and either returns a Limiter whose limit lies in its bounds and
// that runs a call, or an error that names the first field the documented
// rules make invalid, exactly when one is invalid.
func FuzzConfig(f *testing.F) {
	f.Add(0, 0, 0, 0, int64(0), 0.0, int64(0))
	f.Add(5, 3, 0, 0, int64(0), 0.0, int64(0))
	f.Add(300, 0, 0, 0, int64(0), 0.0, int64(0))
	f.Add(1, 1, 1, adaptive.Unbounded, int64(math.MaxInt64), 1.0, int64(1))
	f.Add(math.MaxInt, math.MaxInt, 0, math.MinInt, int64(-1), math.NaN(), int64(-1))
	f.Add(2, 10, 11, 0, int64(0), 0.99, int64(0))
	f.Fuzz(func(t *testing.T, minL, maxL, initial, maxQueue int, maxWait int64, tolerance float64, probe int64) {
		cfg := adaptive.Config{MinLimit: minL, MaxLimit: maxL, InitialLimit: initial, MaxQueue: maxQueue,
			MaxWait: time.Duration(maxWait), Tolerance: tolerance, ProbeInterval: time.Duration(probe)}
		effMin, effMax := minL, maxL
		if effMin == 0 {
			effMin = 1
		}
		if effMax == 0 {
			effMax = 200
		}
		var want string
		switch {
		case effMin < 1:
			want = "MinLimit"
		case effMax < effMin:
			want = "MaxLimit"
		case initial != 0 && (initial < effMin || initial > effMax):
			want = "InitialLimit"
		case maxQueue < 0 && maxQueue != adaptive.Unbounded:
			want = "MaxQueue"
		case maxWait < 0:
			want = "MaxWait"
		case tolerance != 0 && !(tolerance >= 1 && !math.IsInf(tolerance, 0)):
			want = "Tolerance"
		case probe < 0:
			want = "ProbeInterval"
		}
		l, err := adaptive.New(cfg)
		if err != nil {
			if l != nil {
				t.Fatal("New returned a Limiter and an error")
			}
			prefix := "adaptive: Config." + want + " "
			if want == "" || !strings.HasPrefix(err.Error(), prefix) {
				t.Fatalf("New(%+v) = %q; want an error starting %q", cfg, err, prefix)
			}
			return
		}
		if want != "" {
			t.Fatalf("New(%+v) accepted an invalid %s", cfg, want)
		}
		defer l.Close()
		if lim := l.Limit(); lim < effMin || lim > effMax {
			t.Fatalf("Limit() = %d outside [%d, %d]", lim, effMin, effMax)
		}
		ran := 0
		if err := l.Execute(context.Background(), func(context.Context) error { ran++; return nil }); err != nil || ran != 1 {
			t.Fatalf("Execute = %v, fn ran %d times", err, ran)
		}
		if l.Active() != 0 || l.Queued() != 0 {
			t.Fatalf("after a call: Active %d, Queued %d", l.Active(), l.Queued())
		}
	})
}

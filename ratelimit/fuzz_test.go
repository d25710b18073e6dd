package ratelimit_test

import (
	"testing"
	"time"

	"github.com/watertight/watertight/ratelimit"
)

// FuzzConfig checks that New either fails with a message naming a field or
// returns a Limiter that admits a call.
func FuzzConfig(f *testing.F) {
	f.Add(0.0, 0, 0.0, 0, int64(0), int64(0))
	f.Add(10.0, 1, 60000.0, 0, int64(time.Second), int64(-1))
	f.Add(-1.0, -1, -1.0, -1, int64(-1), int64(-1))
	f.Fuzz(func(t *testing.T, rps float64, burst int, tpm float64, tburst int, maxHold, maxWait int64) {
		l, err := ratelimit.New(ratelimit.Config{RequestsPerSecond: rps, Burst: burst, TokensPerMinute: tpm,
			TokenBurst: tburst, MaxHold: time.Duration(maxHold), MaxWait: time.Duration(maxWait)})
		if err != nil {
			if l != nil {
				t.Fatal("a Limiter with an error")
			}
			return
		}
		if l.MaxWait() <= 0 {
			t.Fatalf("MaxWait %v", l.MaxWait())
		}
	})
}

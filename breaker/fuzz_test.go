package breaker_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
)

// FuzzConfig builds a Config from fuzzed fields and checks that New never
// panics and either returns an error that starts with "breaker: Config." and
// names the first field the documented rules make invalid (exactly when one
// is), or a Breaker that runs a call. When the consecutive rule alone trips
// it within 8 failures and OpenTimeout is at most an hour, it also checks
// the whole cycle in fake time: open on the Nth failure and rejecting, still
// open 1 ns before OpenTimeout (2 ns after opening for 1 ns), half-open at
// it, and closed after HalfOpenRequests (default 1) successful probes.
func FuzzConfig(f *testing.F) {
	for _, s := range []struct {
		consecutive, minRequests, halfOpen uint32
		ratio                              float64
		window, openTimeout                int64
	}{
		{0, 0, 0, 0, 0, 0}, {1, 0, 1, 0, 0, 1}, {3, 0, 2, 0, int64(time.Second), int64(time.Minute)},
		{0, 10, 0, 0.5, 0, 0}, {0, 0, 0, math.NaN(), 0, 0}, {0, 0, 0, -0.1, 0, 0}, {0, 0, 0, 1.5, 0, 0},
		{0, 0, 0, 0, -1, 0}, {0, 0, 0, 0, 0, -1}, {math.MaxUint32, math.MaxUint32, math.MaxUint32, 1, math.MaxInt64, math.MaxInt64},
		{2, 0, 8, 0, 1, 2},
	} {
		f.Add("fuzz", s.consecutive, s.ratio, s.minRequests, s.window, s.openTimeout, s.halfOpen)
	}
	f.Fuzz(func(t *testing.T, name string, consecutive uint32, ratio float64, minRequests uint32, window, openTimeout int64, halfOpen uint32) {
		cfg := breaker.Config{
			Name: name, ConsecutiveFailures: consecutive, FailureRatio: ratio, MinRequests: minRequests,
			Window: time.Duration(window), OpenTimeout: time.Duration(openTimeout), HalfOpenRequests: halfOpen,
		}
		var wantField string
		switch {
		case math.IsNaN(ratio) || ratio < 0 || ratio > 1:
			wantField = "FailureRatio"
		case window < 0:
			wantField = "Window"
		case openTimeout < 0:
			wantField = "OpenTimeout"
		}
		b, err := breaker.New(cfg)
		if err != nil {
			if b != nil {
				t.Fatal("New returned a Breaker and an error")
			}
			prefix := "breaker: Config." + wantField
			if wantField == "" || !strings.HasPrefix(err.Error(), prefix+" ") {
				t.Fatalf("New(%+v) = %q; want an error starting %q", cfg, err, prefix)
			}
			return
		}
		if wantField != "" {
			t.Fatalf("New(%+v) accepted an invalid %s", cfg, wantField)
		}
		defer b.Close()
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("Execute = %v", err)
		}
		n := consecutive
		if n == 0 && ratio == 0 {
			n = breaker.DefaultConsecutiveFailures
		}
		ot := time.Duration(openTimeout)
		if ot == 0 {
			ot = breaker.DefaultOpenTimeout
		}
		probes := max(halfOpen, breaker.DefaultHalfOpenRequests)
		if ratio != 0 || n == 0 || n > 8 || ot > time.Hour || probes > 8 {
			return
		}
		synctest.Test(t, func(t *testing.T) {
			b, err := breaker.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			failing := func(context.Context) error { return errors.New("down") }
			for i := uint32(1); i <= n; i++ {
				if b.State() != breaker.Closed {
					t.Fatalf("state %v after %d failures; want closed until %d", b.State(), i-1, n)
				}
				b.Execute(context.Background(), failing)
			}
			if b.State() != breaker.Open {
				t.Fatalf("state %v after %d failures; want open", b.State(), n)
			}
			if err := b.Execute(context.Background(), failing); !errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("open breaker: Execute = %v", err)
			}
			time.Sleep(max(ot-1, 1))
			if b.State() != breaker.Open {
				t.Fatalf("state %v just before OpenTimeout %v; want open", b.State(), ot)
			}
			time.Sleep(1)
			if b.State() != breaker.HalfOpen {
				t.Fatalf("state %v at OpenTimeout %v; want half-open", b.State(), ot)
			}
			for i := uint32(0); i < probes; i++ {
				if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
					t.Fatalf("probe %d: %v", i+1, err)
				}
			}
			if b.State() != breaker.Closed {
				t.Fatalf("state %v after %d good probes; want closed", b.State(), probes)
			}
		})
	})
}

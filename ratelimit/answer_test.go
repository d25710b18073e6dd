package ratelimit_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/ratelimit"
)

// The zero Answer asks for no hold: the next call goes at once.
func TestZeroAnswerHoldsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		l.Observe(ratelimit.Answer{})
		if h := l.Held(); h != 0 {
			t.Errorf("Held = %v after the zero Answer, want 0", h)
		}
		start := time.Now()
		if err := l.Execute(context.Background(), ok); err != nil || time.Since(start) != 0 {
			t.Errorf("Execute = %v after %v, want nil at once", err, time.Since(start))
		}
	})
}

// A Hold of 0 or less, or of more than a day, asks for none; a longer one
// than MaxHold is capped at it.
func TestAnswerHoldBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, d := range []time.Duration{-time.Second, 0, 24*time.Hour + 1} {
			l := newLimiter(t, ratelimit.Config{})
			l.Observe(ratelimit.Answer{Hold: d})
			if h := l.Held(); h != 0 {
				t.Errorf("Hold %v: Held = %v, want 0", d, h)
			}
		}
		l := newLimiter(t, ratelimit.Config{MaxHold: 2 * time.Second})
		l.Observe(ratelimit.Answer{Hold: time.Hour})
		if h := l.Held(); h != 2*time.Second {
			t.Errorf("Hold 1h, MaxHold 2s: Held = %v, want 2s", h)
		}
	})
}

// After a hold, a negative Remaining paces the gate's timed release as a
// Remaining of 0 does, and a negative Limit as none.
func TestAnswerNegativeCountsAsZero(t *testing.T) {
	admitted := func(remaining, limit int) []time.Duration {
		var at []time.Duration
		synctest.Test(t, func(t *testing.T) {
			l := newLimiter(t, ratelimit.Config{})
			start := time.Now()
			l.Observe(ratelimit.Answer{Hold: time.Second})
			time.Sleep(time.Second)
			l.Observe(ratelimit.Answer{Counted: true, Remaining: remaining, Limit: limit, FullAt: time.Now().Add(6 * time.Second)})
			var mu sync.Mutex
			release := make(chan struct{})
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					l.Execute(context.Background(), func(context.Context) error {
						mu.Lock()
						at = append(at, time.Since(start))
						mu.Unlock()
						<-release
						return nil
					})
				})
			}
			time.Sleep(time.Second)
			synctest.Wait()
			close(release)
			wg.Wait()
		})
		return at
	}
	if got, want := admitted(-3, 60), admitted(0, 60); !slices.Equal(got, want) {
		t.Errorf("Remaining -3: admitted at %v, want %v (as Remaining 0)", got, want)
	}
	if got, want := admitted(0, -60), admitted(0, 0); !slices.Equal(got, want) {
		t.Errorf("Limit -60: admitted at %v, want %v (as no limit)", got, want)
	}
}

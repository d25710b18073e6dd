package ratelimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/ratelimit"
)

// A reset further than MaxHold away (a daily bucket's, 20 h) does not order
// the answers: taken as the mark, it made every later answer look older, and
// the gate let one call through at a time.
func TestGateIgnoresAFarResetForOrder(t *testing.T) {
	for _, first := range []string{"", "20h"} {
		t.Run("first reset "+first, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLimiter(t, ratelimit.Config{})
				b := &honestBucket{limit: 60, window: 6 * time.Second, last: time.Now()}
				observe(l, resp(429, "Retry-After", "1"))
				r := runLoad(l, b, 8, 30*time.Second, 3*time.Second, time.Second, first)
				t.Logf("ok %d, rejected %d, other %d; the server answered %d with 429", r.ok.Load(), r.rejected.Load(), r.other.Load(), r.served429.Load())
				if r.ok.Load() < 235 {
					t.Errorf("%d of 240 calls ok (%d rejected), want at least 235", r.ok.Load(), r.rejected.Load())
				}
			})
		})
	}
}

// The answer that sets a hold orders the answers after it: a slow answer to
// an attempt sent before the hold (40 left, full in 2 s), observed after the
// hold has ended, is older than the 429's (full in 6 s) and lets no burst
// through.
func TestGateOrdersByTheHoldsAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		var in atomic.Int32
		before := make(chan int32, 1)
		straggler := make(chan error, 1)
		go func() {
			straggler <- l.Execute(context.Background(), func(context.Context) error {
				time.Sleep(2050 * time.Millisecond)
				before <- in.Load()
				observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "40", "x-ratelimit-reset-requests", "2s"))
				return nil
			})
		}()
		time.Sleep(time.Second)
		// Spent, full in 6 s: a hold of 100 ms, then one more every 100 ms.
		observe(l, resp(429, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6s"))
		release := make(chan struct{})
		_, errs := gateCalls(l, 30, func(int) { in.Add(1) }, release)
		if err := <-straggler; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		was := <-before
		if got := in.Load(); got != was {
			t.Errorf("%d attempts in fn after the straggler's answer, %d before: want none let through by it", got, was)
		}
		close(release)
		for range 30 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})
}

// The first answer to name a count leaves out the attempts the gate let
// through that the server had not counted yet, though none has named a
// count before: with a hung probe and one more let through by the timed
// release, the second's answer saying 5 left lets 4 more go, not 5.
func TestGateFirstCountLeavesOutTheUncounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		l.HoldFor(time.Second)
		release := make(chan struct{})
		in, errs := gateCalls(l, 10, func(i int) {
			if i == 2 {
				// A refill of over a second: no timed release while the
				// test looks.
				observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "5", "x-ratelimit-reset-requests", "55s"))
			}
		}, release)
		time.Sleep(time.Second) // the hold ends: the probe goes, and hangs
		synctest.Wait()
		if got := in.Load(); got != 1 {
			t.Fatalf("%d attempts in fn after the hold, want 1", got)
		}
		time.Sleep(time.Second) // a hold's length later, one more
		synctest.Wait()
		if got := in.Load(); got != 6 {
			t.Errorf("%d attempts in fn after an answer saying 5 left with one other out, want 6 (2 + 4)", got)
		}
		close(release)
		for range 10 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})
}

package adaptive_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/policy"
)

// 3 calls hang (no deadline) from the start, beside 6 callers of 10 ms calls:
// the first probe can never get its 10 samples while they are held. Nothing
// can be measured, but the limiter must not sit at the probe's cap: each
// abandoned probe doubles the wait for the next (ProbeInterval, then 2x,
// 4x, 8x), and in between it admits InitialLimit, rather than staying
// capped for the whole run.
func TestHungFromStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{})
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() { l.Execute(ctx, func(c context.Context) error { <-c.Done(); return nil }) })
		}
		synctest.Wait() // the 3 hung calls hold the probe's 3 slots
		if l.Active() != 3 {
			t.Fatalf("active %d", l.Active())
		}
		var ok, rejected atomic.Int64
		for range 6 {
			wg.Go(func() {
				for ctx.Err() == nil {
					err := l.Execute(ctx, func(context.Context) error { time.Sleep(10 * time.Millisecond); return nil })
					if errors.Is(err, policy.ErrRejected) {
						rejected.Add(1)
						time.Sleep(10 * time.Millisecond)
					} else {
						ok.Add(1)
					}
				}
			})
		}
		capped := 0
		for range 300 {
			time.Sleep(time.Second)
			if l.Admission() < l.Limit() {
				capped++
			}
		}
		stop()
		wg.Wait()
		st := l.State()
		t.Logf("300 s: %+v Limit %d, admission capped in %d of 300 s, ok %d rejected %d", st, l.Limit(), capped, ok.Load(), rejected.Load())
		if capped > 100 || ok.Load() < 2*rejected.Load() {
			t.Errorf("admission capped in %d of 300 s, %d admitted, %d rejected; want at most 100 capped, at least twice as many admitted as rejected", capped, ok.Load(), rejected.Load())
		}
	})
}

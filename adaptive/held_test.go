package adaptive_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/policy"
)

// Calls held for long (streams, long polls, calls with no deadline) beside
// steady short traffic: once a probe starts while 3 or more are held, nothing
// of the probe's completes and nothing in flight drains. The probe must still
// be abandoned after its stall age, or every short call is rejected for as
// long as the long ones are held.
func TestHeldCallsDoNotFreezeAProbe(t *testing.T) {
	for _, tc := range []struct {
		name string
		held int
		hold time.Duration
	}{
		{"3 hung", 3, time.Hour},
		{"3 streams of 20 s", 3, 20 * time.Second},
		{"5 streams of 20 s", 5, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := mustNew(t, adaptive.Config{ProbeInterval: 5 * time.Second})
				ctx, stop := context.WithCancel(context.Background())
				var wg sync.WaitGroup
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
				time.Sleep(3 * time.Second) // the first probe is done
				for range tc.held {
					wg.Go(func() {
						for ctx.Err() == nil {
							if l.Execute(ctx, func(c context.Context) error {
								select {
								case <-time.After(tc.hold):
								case <-c.Done():
								}
								return nil
							}) != nil {
								time.Sleep(10 * time.Millisecond)
							}
						}
					})
				}
				ok.Store(0)
				rejected.Store(0)
				capped := 0
				for range 60 {
					time.Sleep(time.Second)
					if l.Admission() < l.Limit() {
						capped++
					}
				}
				stop()
				wg.Wait()
				// A probe every 5 s, each abandoned after 1 s without progress:
				// about a fifth of the time capped, every short call admitted
				// in the rest.
				if capped > 20 || rejected.Load() > ok.Load()/4 {
					t.Errorf("60 s with %d calls held: admission capped in %d of 60 readings, %d admitted, %d rejected; want at most 20 capped, rejections under a quarter of admissions",
						tc.held, capped, ok.Load(), rejected.Load())
				}
			})
		})
	}
}

// One call that never returns keeps a call in flight; a probe left by traffic
// must still be abandoned when the next burst arrives, and a stale probe's
// late sample must not revive it.
func TestOneHungCallThenBursts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{})
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { l.Execute(ctx, func(c context.Context) error { <-c.Done(); return nil }) })
		// The first probe is measured by 10 calls, so the limiter knows
		// its latency; the hung call then holds one slot for ever.
		for range 10 {
			l.Execute(ctx, func(context.Context) error { time.Sleep(20 * time.Millisecond); return nil })
		}
		for i := range 3 {
			time.Sleep(40 * time.Second) // idle past ProbeInterval
			if got := burst(l, 15, 20*time.Millisecond); got > 0 {
				t.Errorf("burst %d after idle, one call hung: %d of 15 rejected (Limit %d, %+v); want 0", i+1, got, l.Limit(), l.State())
			}
		}
		stop()
		wg.Wait()
	})
}

// Low steady traffic whose latency has a tail (1 call in 10 takes 10 times
// the others), with a burst of 15 every 7 s, for 300 s. The tail is no
// congestion: the limit must stay up and the bursts be admitted. The
// bursts never fill the limit of 20, so no window lowers it: 8 runs
// (different seeds), none of their burst calls rejected, none of their
// final limits below 20.
func TestTailIsNotCongestion(t *testing.T) {
	const runs = 8
	for run := range runs {
		r, n, limit := tailRun(t, uint64(run))
		t.Logf("run %d: %d of %d burst calls rejected, final limit %d", run, r, n, limit)
		if r > 0 || limit < 20 {
			t.Errorf("run %d of 300 s: %d of %d burst calls rejected, final limit %d; want none rejected and a limit of at least 20",
				run, r, n, limit)
		}
	}
}

// tailRun runs TestTailIsNotCongestion's scenario once, in a bubble of its
// own, and returns the burst calls rejected, the burst calls made and the
// final limit.
func tailRun(t *testing.T, seed uint64) (rejected, total int64, limit int) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{})
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, 1))
			for ctx.Err() == nil {
				d := 20 * time.Millisecond
				if r.IntN(10) == 0 {
					d = 200 * time.Millisecond
				}
				l.Execute(ctx, func(context.Context) error { time.Sleep(d); return nil })
				time.Sleep(250 * time.Millisecond)
			}
		})
		var rej, bursts atomic.Int64
		for i := range 3000 {
			time.Sleep(100 * time.Millisecond)
			if i%70 == 69 {
				bursts.Add(1)
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(i), 2+seed))
					var bw sync.WaitGroup
					for range 15 {
						d := 20 * time.Millisecond
						if r.IntN(10) == 0 {
							d = 200 * time.Millisecond
						}
						bw.Go(func() {
							if errors.Is(l.Execute(ctx, func(context.Context) error { time.Sleep(d); return nil }), policy.ErrRejected) {
								rej.Add(1)
							}
						})
					}
					bw.Wait()
				})
			}
		}
		stop()
		wg.Wait()
		rejected, total, limit = rej.Load(), 15*bursts.Load(), l.Limit()
	})
	return rejected, total, limit
}

package deadline

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight/watertight/internal/telemetry"
)

// TestConcurrentStress runs many calls at once through two shared
// Deadlines, on the real clock, with random parent deadlines, random
// cancellations and random fn behaviour, and checks every call's outcome
// against what its context says happened, and the timeout count against
// the counter and the hook.
func TestConcurrentStress(t *testing.T) {
	mp, reader := newMeter(t)
	var hooks atomic.Int64
	onTimeout := func(context.Context, time.Duration) { hooks.Add(1) }
	ds := []*Deadline{
		mustNew(t, Config{Name: "short", Timeout: 50 * time.Microsecond, MeterProvider: mp, OnTimeout: onTimeout}),
		mustNew(t, Config{Name: "long", Timeout: 300 * time.Microsecond, MeterProvider: mp, OnTimeout: onTimeout}),
	}
	const goroutines, calls = 32, 300
	var exceeded, timers atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range calls {
				d := ds[rng.IntN(len(ds))]
				parent, cancel := context.WithCancel(context.Background())
				stop := func() bool { return false }
				switch rng.IntN(3) {
				case 0:
					parent, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(400))*time.Microsecond)
				case 1:
					stop = time.AfterFunc(time.Duration(rng.IntN(400))*time.Microsecond, cancel).Stop
				}
				behaviour := rng.IntN(4)
				var seen context.Context
				var fnErr error
				var calledAt time.Time
				var ran int
				err := d.Execute(parent, func(ctx context.Context) error {
					ran++
					seen, calledAt = ctx, time.Now()
					switch behaviour {
					case 0:
						fnErr = nil
					case 1:
						fnErr = errBoom
					case 2:
						<-ctx.Done()
						fnErr = ctx.Err()
					case 3: // ignores ctx for a while
						timer := time.NewTimer(time.Duration(rng.IntN(400)) * time.Microsecond)
						<-timer.C
						fnErr = errBoom
					}
					return fnErr
				})
				stop()
				cancel()
				if ran != 1 {
					t.Errorf("fn ran %d times", ran)
					return
				}
				// No limit passed: fn's deadline is no later than ours or
				// the caller's.
				if dl, ok := seen.Deadline(); !ok || dl.After(calledAt.Add(d.Timeout())) {
					t.Errorf("fn's deadline %v, %v is past now+Timeout %v", dl, ok, calledAt.Add(d.Timeout()))
				} else if pdl, ok := parent.Deadline(); ok && dl.After(pdl) {
					t.Errorf("fn's deadline %v is past the caller's %v", dl, pdl)
				}
				if seen != parent {
					timers.Add(1)
					if seen.Err() == nil {
						t.Error("fn's ctx not done after the call: timer leaked")
					}
				}
				var ee *ExceededError
				if errors.As(err, &ee) {
					exceeded.Add(1)
					if fnErr == nil || ee.Err != fnErr || seen == parent || context.Cause(seen) != d.Cause() {
						t.Errorf("ExceededError %v without our timer firing on a failed fn (fn: %v)", err, fnErr)
					}
				} else if err != fnErr {
					t.Errorf("err = %v, want fn's %v unchanged", err, fnErr)
				} else if behaviour == 2 && err != nil && seen != parent && context.Cause(seen) == d.Cause() {
					// Only a fn that returned because its ctx ended is sure to
					// have seen our timer fire before it returned: for the
					// others the timer may fire after fn returned, which Exit
					// rightly does not count as a timeout.
					t.Errorf("err = %v: our timer fired and fn failed, want ErrExceeded", err)
				}
			}
		}()
	}
	wg.Wait()
	counted := collect(t, reader, telemetry.MetricTimeouts)
	if got := counted["short"] + counted["long"]; got != exceeded.Load() || hooks.Load() != exceeded.Load() {
		t.Errorf("%d ExceededErrors, counter %v, %d hooks: want all equal", exceeded.Load(), counted, hooks.Load())
	}
	t.Logf("%d calls, %d with a timer, %d exceeded", goroutines*calls, timers.Load(), exceeded.Load())
}

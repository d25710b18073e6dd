package adaptive_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/watertight/watertight/adaptive"
)

// TestLimitProperties drives limiters of random configurations with random
// calls (latencies, errors, timeouts, cancellations), observations and
// pauses, in synctest bubbles, and checks after every step that the limit
// and its estimate lie in [MinLimit, MaxLimit], and in every call that no
// call was admitted with the limit already reached: a call that finds more
// calls in flight than Limit() must find that the limit was lowered since
// the oldest call still pending started (lowering revokes nothing, and an
// acquire under way may be admitted under the limit it read). At the end
// every call has ended and no slot or waiter is left.
func TestLimitProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			minL := rapid.IntRange(1, 5).Draw(rt, "min")
			maxL := rapid.IntRange(minL, minL+30).Draw(rt, "max")
			cfg := adaptive.Config{
				MinLimit:      minL,
				MaxLimit:      maxL,
				InitialLimit:  rapid.IntRange(minL, maxL).Draw(rt, "initial"),
				MaxQueue:      rapid.SampledFrom([]int{0, 5, adaptive.Unbounded}).Draw(rt, "maxQueue"),
				Tolerance:     rapid.Float64Range(1, 3).Draw(rt, "tolerance"),
				ProbeInterval: time.Duration(rapid.SampledFrom([]int{0, 100, 1000, 5000}).Draw(rt, "probeIntervalMs")) * time.Millisecond,
			}
			l, err := adaptive.New(cfg)
			if err != nil {
				rt.Fatalf("New(%+v): %v", cfg, err)
			}
			defer l.Close()
			var (
				wg         sync.WaitGroup
				inFlight   atomic.Int64
				violations atomic.Int64
			)
			boom := errors.New("boom")
			// pending holds, for each call between its start and its end, the
			// number of limit drops seen when it started. An acquire that
			// started before a drop may still be admitted under the old
			// limit; so more calls in flight than the limit are fine only if
			// the limit dropped since the oldest pending call started.
			var (
				pendingMu sync.Mutex
				pending   = map[int]int64{}
				nextID    int
			)
			call := func(lat time.Duration, outcome int) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*lat+time.Millisecond)
				defer cancel()
				pendingMu.Lock()
				id := nextID
				nextID++
				pending[id] = l.Drops()
				pendingMu.Unlock()
				defer func() {
					pendingMu.Lock()
					delete(pending, id)
					pendingMu.Unlock()
				}()
				l.Execute(ctx, func(ctx context.Context) error {
					n := inFlight.Add(1)
					defer inFlight.Add(-1)
					if lim := l.Limit(); n > int64(lim) {
						pendingMu.Lock()
						oldest := l.Drops()
						for _, d := range pending {
							oldest = min(oldest, d)
						}
						if oldest == l.Drops() {
							violations.Add(1)
						}
						pendingMu.Unlock()
					}
					time.Sleep(lat)
					switch outcome {
					case 1:
						return boom
					case 2:
						return context.DeadlineExceeded
					case 3:
						return context.Canceled
					}
					return nil
				})
			}
			defer func() { wg.Wait(); synctest.Wait() }()
			rt.Repeat(map[string]func(*rapid.T){
				"calls": func(rt *rapid.T) {
					// n callers, each making k calls in a row.
					n := rapid.IntRange(1, 30).Draw(rt, "n")
					k := rapid.IntRange(1, 30).Draw(rt, "k")
					base := time.Duration(rapid.IntRange(0, 50).Draw(rt, "latencyMs")) * time.Millisecond
					outcome := rapid.IntRange(0, 5).Draw(rt, "outcome") // 4, 5: success
					for i := range n {
						wg.Go(func() {
							for range k {
								call(base+time.Duration(i)*time.Millisecond, outcome)
							}
						})
					}
				},
				"observe": func(rt *rapid.T) {
					d := time.Duration(rapid.IntRange(0, 100).Draw(rt, "observeMs")) * time.Millisecond
					failed := rapid.Bool().Draw(rt, "failed")
					for range rapid.IntRange(1, 30).Draw(rt, "times") {
						l.Observe(d, failed)
					}
				},
				"sleep": func(rt *rapid.T) {
					time.Sleep(time.Duration(rapid.IntRange(1, 500).Draw(rt, "sleepMs")) * time.Millisecond)
				},
				"": func(rt *rapid.T) {
					st := l.State()
					if lim := l.Limit(); lim < minL || lim > maxL {
						rt.Fatalf("Limit() = %d outside [%d, %d]", lim, minL, maxL)
					}
					if st.Estimate < float64(minL) || st.Estimate > float64(maxL) {
						rt.Fatalf("estimate %v outside [%d, %d]", st.Estimate, minL, maxL)
					}
					if v := violations.Load(); v != 0 {
						rt.Fatalf("%d calls admitted above the limit", v)
					}
				},
			})
			wg.Wait()
			if a, q := l.Active(), l.Queued(); a != 0 || q != 0 {
				rt.Fatalf("after every call: Active %d, Queued %d", a, q)
			}
			if v := violations.Load(); v != 0 {
				rt.Fatalf("%d calls admitted above the limit", v)
			}
		})
	})
}

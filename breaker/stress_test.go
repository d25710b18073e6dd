package breaker

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// TestStress runs many goroutines through one breaker with random outcomes,
// cancellations, panics, Goexits, ForceOpen and Reset, and checks that the
// hooks ran one at a time with each change starting where the last ended,
// that every change and rejection was counted, and that the breaker is not
// wedged: it closes again after OpenTimeout with good probes.
func TestStress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			workers     = 32
			calls       = 1000
			openTimeout = 20 * time.Millisecond
			probes      = 2
		)
		r := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
		defer mp.Shutdown(context.Background())

		var (
			inHook     atomic.Int32
			hookErr    atomic.Value
			hookMu     sync.Mutex
			last       = Closed
			changes    int64
			onRejected atomic.Int64
			returned   atomic.Int64
			b          *Breaker
		)
		b, err := New(Config{
			Name: "stress", ConsecutiveFailures: 4, FailureRatio: 0.5, MinRequests: 8,
			Window: time.Second, OpenTimeout: openTimeout, HalfOpenRequests: probes,
			MeterProvider: mp,
			OnReject:      func(context.Context, *policy.RejectedError) { onRejected.Add(1) },
			OnStateChange: func(from, to State) {
				if inHook.Add(1) != 1 {
					hookErr.Store("hooks ran concurrently")
				}
				hookMu.Lock()
				if from != last || from == to {
					hookErr.Store("change " + from.String() + "->" + to.String() + " after " + last.String())
				}
				last = to
				changes++
				hookMu.Unlock()
				_ = b.State()
				inHook.Add(-1)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()

		// Every timer here lasts at least 1ms: under -race, Go 1.26.8 crashes
		// (a ThreadSanitizer CHECK or SIGSEGV) now and then when a goroutine
		// in a synctest bubble receives from time.After(0).
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Go(func() { // chaos: force open and reset now and then
			rng := rand.New(rand.NewPCG(1, 2))
			for {
				select {
				case <-stop:
					b.Reset()
					return
				case <-time.After(time.Duration(1+rng.IntN(500)) * time.Millisecond):
				}
				if rng.IntN(4) == 0 {
					b.ForceOpen()
				} else {
					b.Reset()
				}
			}
		})
		var workersWG sync.WaitGroup
		for w := range workers {
			workersWG.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for range calls {
					ctx, cancel := context.WithCancel(context.Background())
					if rng.IntN(10) == 0 {
						cancel()
					}
					kind := rng.IntN(20)
					var err error
					do := func() {
						defer func() {
							if r := recover(); r != nil && r != "chaos" {
								panic(r)
							}
						}()
						err = b.Execute(ctx, func(ctx context.Context) error {
							select {
							case <-time.After(time.Duration(1+rng.IntN(5)) * time.Millisecond):
							case <-ctx.Done():
								return ctx.Err()
							}
							switch {
							case kind == 0:
								panic("chaos")
							case kind == 1:
								runtime.Goexit()
							case kind < 7:
								return errBoom
							}
							return nil
						})
					}
					if kind <= 1 {
						// Panics and Goexits run on their own goroutine.
						var wg sync.WaitGroup
						wg.Go(do)
						wg.Wait()
					} else {
						do()
					}
					cancel()
					if errors.Is(err, policy.ErrRejected) {
						returned.Add(1)
					}
					time.Sleep(time.Duration(1+rng.IntN(3)) * time.Millisecond)
				}
			})
		}
		workersWG.Wait()
		close(stop)
		wg.Wait()

		if e := hookErr.Load(); e != nil {
			t.Fatal(e)
		}
		// Not wedged: after OpenTimeout, good probes close it.
		time.Sleep(openTimeout)
		for range probes {
			if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
				t.Fatalf("after the storm: %v", err)
			}
		}
		if s := b.State(); s != Closed {
			t.Fatalf("after the storm: %v, want closed", s)
		}
		var total int64
		for _, v := range points(t, r, telemetry.MetricTransitions) {
			total += v
		}
		hookMu.Lock()
		defer hookMu.Unlock()
		if total != changes || last != Closed {
			t.Fatalf("transitions counted %d, hooks saw %d ending %v", total, changes, last)
		}
		var rejected int64
		for _, v := range points(t, r, telemetry.MetricRejections) {
			rejected += v
		}
		if rejected != returned.Load() || rejected != onRejected.Load() {
			t.Fatalf("rejections: counted %d, returned %d, OnReject %d", rejected, returned.Load(), onRejected.Load())
		}
		if changes < 50 || rejected == 0 {
			t.Fatalf("the storm was too calm: %d changes, %d rejections", changes, rejected)
		}
		t.Logf("%d changes, %d rejections", changes, rejected)
	})
}

package adaptive

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A call that arrives at a stale probe while another goroutine holds the
// lock to abandon it (an admission of the same burst, say) must wait for
// the abandonment rather than meet the probe's cap: with the cap full it
// was rejected while Limit read 20. (The cause of TestOneHungCallThenBursts
// and TestIdleProbeIsAbandoned failing about 1 run in 100, up to 12 of a
// burst of 15 rejected.) The test holds the lock as that goroutine would,
// sees the call wait for it, abandons the probe and lets go.
func TestStaleProbeArrivalWaitsForTheCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup leaves a probe whose cap is full, calls that hang until
		// ctx is done holding it, and returns how long to wait for the
		// probe to become stale.
		setup func(l *Limiter, ctx context.Context, wg *sync.WaitGroup) time.Duration
	}{
		{"first probe", func(l *Limiter, ctx context.Context, wg *sync.WaitGroup) time.Duration {
			for range probeConcurrency {
				wg.Go(func() { l.Execute(ctx, func(c context.Context) error { <-c.Done(); return nil }) })
			}
			// Calls in flight give the first probe ProbeInterval.
			return DefaultProbeInterval + time.Second
		}},
		{"measured", func(l *Limiter, ctx context.Context, wg *sync.WaitGroup) time.Duration {
			for range probeSamples {
				l.Execute(ctx, func(context.Context) error { time.Sleep(20 * time.Millisecond); return nil })
			}
			l.mu.Lock()
			measured := l.ctl.measured
			l.startProbe(l.since(time.Now()))
			l.mu.Unlock()
			if !measured {
				panic("the first probe did not end measured")
			}
			for range probeConcurrency {
				wg.Go(func() { l.Execute(ctx, func(c context.Context) error { <-c.Done(); return nil }) })
			}
			return 2 * minProbeAge
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, err := New(Config{})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				ctx, stop := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				defer wg.Wait()
				defer stop()
				time.Sleep(tc.setup(l, ctx, &wg))
				synctest.Wait()
				if !l.probing.Load() || l.Active() != probeConcurrency || l.slots.Limit() != probeConcurrency {
					t.Fatalf("set up: probing %v, %d active, admission %d; want a probe with its cap of %d full",
						l.probing.Load(), l.Active(), l.slots.Limit(), probeConcurrency)
				}

				l.mu.Lock() // as the admission that abandons the probe does
				done := make(chan error, 1)
				go func() {
					done <- l.Execute(context.Background(), func(context.Context) error { return nil })
				}()
				var early error
				waiting := false
				for !waiting {
					select {
					case early = <-done:
						waiting = true
					default:
						waiting = waitsForLockIn("(*Limiter).probeCheck")
						runtime.Gosched()
					}
				}
				l.checkProbe()
				abandoned := !l.probing.Load()
				l.mu.Unlock()
				if !abandoned {
					t.Fatalf("the check under the lock kept the probe (%+v)", l.ctl)
				}
				if early != nil {
					t.Fatalf("a call that arrived while the stale probe was being abandoned: %v (Limit %d, admission %d); want it to wait for the check, and be admitted", early, l.Limit(), l.slots.Limit())
				}
				if err := <-done; err != nil {
					t.Errorf("after the probe was abandoned: %v (Limit %d, admission %d); want the call admitted", err, l.Limit(), l.slots.Limit())
				}
			})
		})
	}
}

// waitsForLockIn reports whether a goroutine waits for a sync.Mutex in the
// function fn.
func waitsForLockIn(fn string) bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "sync.(*Mutex).Lock(") && strings.Contains(g, fn+"(") {
			return true
		}
	}
	return false
}

// Before the first measurement a probe with calls in flight lives for
// ProbeInterval (stallLimit), not stallAge: a call that arrives then and
// finds the lock taken goes on without waiting for it.
func TestLiveFirstProbeArrivalGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer stop()
		for range probeConcurrency {
			wg.Go(func() { l.Execute(ctx, func(c context.Context) error { <-c.Done(); return nil }) })
		}
		// Past stallAge, well before ProbeInterval: the probe is live.
		time.Sleep(minProbeAge + time.Second)
		synctest.Wait()
		if !l.probing.Load() || l.Active() != probeConcurrency || l.slots.Limit() != probeConcurrency {
			t.Fatalf("set up: probing %v, %d active, admission %d; want a probe with its cap of %d full",
				l.probing.Load(), l.Active(), l.slots.Limit(), probeConcurrency)
		}

		l.mu.Lock() // as a sample or another admission's check does
		done := make(chan error, 1)
		go func() {
			done <- l.Execute(context.Background(), func(context.Context) error { return nil })
		}()
		var got error
		for returned := false; !returned; {
			select {
			case got = <-done:
				returned = true
			default:
				if waitsForLockIn("(*Limiter).probeCheck") {
					l.mu.Unlock()
					<-done
					t.Fatal("a call that arrived at a live first probe, calls in flight, waited for the lock; want it to go on")
				}
				runtime.Gosched()
			}
		}
		l.mu.Unlock()
		if !errors.Is(got, ErrFull) {
			t.Errorf("the call at the probe's full cap: %v; want ErrFull", got)
		}
		if !l.probing.Load() {
			t.Errorf("the live probe was abandoned")
		}
	})
}

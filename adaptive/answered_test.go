package adaptive_test

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

	"github.com/cenkalti/backoff/v4"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

func mustPipeline(t testing.TB, p compose.Policies) *compose.Pipeline {
	t.Helper()
	pl, err := compose.New("dep", p)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func noWait() backoff.BackOff { return &backoff.ZeroBackOff{} }

// heldStream runs one call through p as httppolicy's Transport runs a
// streamed answer: its headers after hdr, then its slot held until body is
// closed.
func heldStream(p *compose.Pipeline, hdr time.Duration, body <-chan struct{}) error {
	return p.Execute(context.Background(), func(ctx context.Context) error {
		time.Sleep(hdr)
		stage.Answered(ctx)
		<-body
		return nil
	})
}

// TestProbeCapsAwaitingCalls: a probe caps the calls awaiting their answer
// at 3, not the slots: a stream whose headers arrived frees its place under
// the cap at once, and holds its slot against the limit until its body
// ends. A call whose answer nobody marks awaits it until it ends.
func TestProbeCapsAwaitingCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{InitialLimit: 5})
		p := mustPipeline(t, compose.Policies{Bulkhead: l})
		var wg sync.WaitGroup
		defer wg.Wait()
		body := make(chan struct{})
		endBodies := sync.OnceFunc(func() { close(body) })
		defer endBodies() // on a failure too, so that the bubble ends
		var failed atomic.Int64
		start := func(n int) {
			for range n {
				wg.Go(func() {
					if heldStream(p, 10*time.Millisecond, body) != nil {
						failed.Add(1)
					}
				})
			}
			synctest.Wait()
		}
		rejected := func(step string) {
			t.Helper()
			err := p.Execute(context.Background(), func(context.Context) error { return nil })
			if !errors.Is(err, policy.ErrRejected) {
				t.Fatalf("%s: err = %v; want a rejection", step, err)
			}
			if err := p.Execute(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, policy.ErrRejected) {
				t.Fatalf("%s, a call without a clock: err = %v; want a rejection", step, err)
			}
		}
		check := func(step string, active, answered, admission int) {
			t.Helper()
			if l.Active() != active || l.Answered() != answered || l.Admission() != admission {
				t.Fatalf("%s: active %d, answered %d, admission %d; want %d, %d, %d",
					step, l.Active(), l.Answered(), l.Admission(), active, answered, admission)
			}
		}
		if !l.State().Probing {
			t.Fatal("a new limiter does not probe")
		}
		start(3)
		check("3 awaiting", 3, 0, 3)
		rejected("3 awaiting")
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		// Answered, the 3 no longer count against the cap: 3 more may
		// await theirs, but the limit (5) bounds the slots.
		check("3 answered", 3, 3, 5)
		start(2)
		check("3 answered, 2 awaiting", 5, 3, 5)
		rejected("at the limit")
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		check("5 answered", 5, 5, 5)
		endBodies()
		wg.Wait()
		if failed.Load() != 0 {
			t.Fatalf("%d admitted streams failed", failed.Load())
		}
		checkCounts(t, l, 0, 0)
		if l.Answered() != 0 {
			t.Fatalf("answered %d after every call ended", l.Answered())
		}
	})
}

// TestProbeCapHandsOffToWaiters: a caller queued at the probe's cap is
// admitted when a call in flight is answered, not only when one ends.
func TestProbeCapHandsOffToWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{MaxQueue: adaptive.Unbounded})
		p := mustPipeline(t, compose.Policies{Bulkhead: l})
		var wg sync.WaitGroup
		defer wg.Wait()
		body := make(chan struct{})
		endBodies := sync.OnceFunc(func() { close(body) })
		defer endBodies() // on a failure too, so that the bubble ends
		for range 3 {
			wg.Go(func() { heldStream(p, 10*time.Millisecond, body) })
		}
		synctest.Wait()
		admitted := make(chan time.Time, 1)
		t0 := time.Now()
		wg.Go(func() {
			p.Execute(context.Background(), func(context.Context) error {
				admitted <- time.Now()
				return nil
			})
		})
		synctest.Wait()
		if l.Queued() != 1 {
			t.Fatalf("queued %d; want the 4th caller waiting at the cap", l.Queued())
		}
		select {
		case at := <-admitted:
			if at.Sub(t0) != 10*time.Millisecond {
				t.Errorf("the waiter was admitted after %v; want 10ms, when the first answers came", at.Sub(t0))
			}
		case <-time.After(time.Second):
			t.Errorf("the waiter was not admitted within 1 s of the answers")
		}
		endBodies()
		wg.Wait()
		checkCounts(t, l, 0, 0)
	})
}

// TestExecuteSamplesAtTheAnswer: used by itself (as httppolicy's
// Transport's Policy, say), Execute samples an attempt up to the answer
// the Transport marks, not up to the end of the body.
func TestExecuteSamplesAtTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{})
		for range 10 {
			l.Execute(context.Background(), func(ctx context.Context) error {
				time.Sleep(20 * time.Millisecond)
				stage.Answered(ctx)
				if l.Answered() != 1 {
					t.Errorf("answered %d after the answer; want 1", l.Answered())
				}
				time.Sleep(500 * time.Millisecond)
				return nil
			})
		}
		if st := l.State(); !st.Measured || st.NoLoad != 20*time.Millisecond {
			t.Errorf("after 10 calls answered at 20 ms: %+v; want noLoad 20ms measured", st)
		}
		if l.Answered() != 0 {
			t.Errorf("answered %d after every call ended", l.Answered())
		}
	})
}

// TestPipelineSamplesEachAttemptAtTheAnswer: through a pipeline with a
// Retry, each attempt is one sample, up to the answer its clock marks.
func TestPipelineSamplesEachAttemptAtTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{})
		rt, err := retry.New(retry.Config{MaxAttempts: 2, NewSchedule: noWait})
		if err != nil {
			t.Fatal(err)
		}
		p := mustPipeline(t, compose.Policies{Bulkhead: l, Retry: rt})
		for range 5 {
			n := 0
			p.Execute(context.Background(), func(ctx context.Context) error {
				n++
				time.Sleep(20 * time.Millisecond)
				stage.Answered(ctx)
				time.Sleep(500 * time.Millisecond)
				if n == 1 {
					return context.DeadlineExceeded // a timeout: a sample, retried
				}
				return nil
			})
		}
		if st := l.State(); !st.Measured || st.NoLoad != 20*time.Millisecond {
			t.Errorf("after 10 attempts answered at 20 ms: %+v; want noLoad 20ms measured", st)
		}
	})
}

// TestRetriedAttemptAwaitsAgain: with a Retry below the limiter, a call
// whose first attempt was answered (and then failed) awaits its answer
// again while its next attempt runs.
func TestRetriedAttemptAwaitsAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{})
		rt, err := retry.New(retry.Config{MaxAttempts: 2, NewSchedule: noWait})
		if err != nil {
			t.Fatal(err)
		}
		p := mustPipeline(t, compose.Policies{Bulkhead: l, Retry: rt})
		var seen []int
		err = p.Execute(context.Background(), func(ctx context.Context) error {
			seen = append(seen, l.Answered())
			time.Sleep(10 * time.Millisecond)
			stage.Answered(ctx)
			seen = append(seen, l.Answered())
			if len(seen) == 2 {
				return errStorm // a 503 after its headers: retried
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := []int{0, 1, 0, 1}; len(seen) != 4 || seen[0] != 0 || seen[1] != 1 || seen[2] != 0 || seen[3] != 1 {
			t.Fatalf("answered before and after each attempt's answer: %v; want %v", seen, want)
		}
		if l.Answered() != 0 {
			t.Fatalf("answered %d after the call", l.Answered())
		}
	})
}

// TestNestedLimitersBothSeeTheAnswer: the answer of a call of a pipeline
// nested in another's fn is the outer call's answer too, and each limiter
// counts it until its own call ends.
func TestNestedLimitersBothSeeTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		outer, inner := mustNew(t, adaptive.Config{}), mustNew(t, adaptive.Config{})
		po := mustPipeline(t, compose.Policies{Bulkhead: outer})
		pi := mustPipeline(t, compose.Policies{Bulkhead: inner})
		err := po.Execute(context.Background(), func(ctx context.Context) error {
			return pi.Execute(ctx, func(ctx context.Context) error {
				time.Sleep(10 * time.Millisecond)
				stage.Answered(ctx)
				if outer.Answered() != 1 || inner.Answered() != 1 {
					t.Errorf("answered: outer %d, inner %d; want 1, 1", outer.Answered(), inner.Answered())
				}
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range []*adaptive.Limiter{outer, inner} {
			checkCounts(t, l, 0, 0)
			if l.Answered() != 0 {
				t.Fatalf("answered %d after the call", l.Answered())
			}
		}
	})
}

// A storm of streamed calls on the real clock, through a pipeline with a
// Retry and through Execute: answers marked or not, panics and
// runtime.Goexit before and after the answer, failures, timeouts and
// cancellations, probes every few windows (ProbeInterval 1 ms), Close
// meanwhile. Every slot, place in the queue and answered count is freed,
// and the limit stays in its bounds. Run with -race.
func TestStormOfStreams(t *testing.T) {
	l := mustNew(t, adaptive.Config{MinLimit: 2, MaxLimit: 40, InitialLimit: 10,
		MaxQueue: adaptive.Unbounded, MaxWait: 5 * time.Millisecond, ProbeInterval: time.Millisecond})
	rt, err := retry.New(retry.Config{MaxAttempts: 3, NewSchedule: noWait})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPipeline(t, compose.Policies{Bulkhead: l, Retry: rt})
	ctx, stop := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer stop()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 12))
			var mu sync.Mutex // r is used by the call's goroutines
			intN := func(n int) int { mu.Lock(); defer mu.Unlock(); return r.IntN(n) }
			for ctx.Err() == nil {
				cctx, cancel := context.WithTimeout(ctx, time.Duration(intN(4000))*time.Microsecond)
				fn := func(ctx context.Context) error {
					time.Sleep(time.Duration(intN(500)) * time.Microsecond)
					k := intN(40)
					switch {
					case k == 0:
						panic("before the answer")
					case k == 1:
						runtime.Goexit()
					case k < 30:
						// The answer, from another goroutine, as fn may.
						done := make(chan struct{})
						go func() { stage.Answered(ctx); close(done) }()
						<-done
					}
					time.Sleep(time.Duration(intN(3000)) * time.Microsecond)
					switch intN(20) {
					case 0:
						panic("after the answer")
					case 1:
						runtime.Goexit()
					case 2, 3:
						return errStorm
					case 4:
						return context.Canceled
					case 5:
						return ctx.Err()
					}
					return nil
				}
				done := make(chan struct{})
				go func() { // a goroutine per call, for Goexit
					defer close(done)
					defer func() { recover() }()
					if g%2 == 0 {
						p.Execute(cctx, fn)
					} else {
						l.Execute(cctx, fn)
					}
				}()
				<-done
				cancel()
			}
		})
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			if lim := l.Limit(); lim < 2 || lim > 40 {
				t.Errorf("Limit %d outside [2, 40]", lim)
			}
			if a := l.Admission(); a > l.MaxLimit() || a < 1 {
				t.Errorf("admission %d outside [1, 40]", a)
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
	time.Sleep(300 * time.Millisecond)
	l.Close()
	wg.Wait()
	checkCounts(t, l, 0, 0)
	if l.Answered() != 0 {
		t.Fatalf("answered %d after the storm", l.Answered())
	}
	if st := l.State(); !st.Probing && l.Admission() != l.Limit() {
		t.Fatalf("no probe runs, admission %d; want the limit %d", l.Admission(), l.Limit())
	}
}

// TestFirstProbeWaitsForStreams: before anything is measured, a probe
// whose slots are all held by answered streams waits for their bodies to
// end (their samples come then), as it waits for any call in flight, and
// ends measured; it is not abandoned as stalled once nothing awaits its
// answer. (With the patience counting only calls awaiting their answer it
// was abandoned after 1 s, and the next probe came a minute later.)
func TestFirstProbeWaitsForStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{InitialLimit: 5})
		p := mustPipeline(t, compose.Policies{Bulkhead: l})
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 6 { // one more than the limit: it retries, and checks the probe
			wg.Go(func() {
				for ctx.Err() == nil {
					if err := streamCall(ctx, p, 200*time.Millisecond, 5*time.Second); err != nil {
						time.Sleep(100 * time.Millisecond)
					}
				}
			})
		}
		time.Sleep(3 * time.Second)
		if st := l.State(); !st.Probing || st.Probes != 1 || l.Answered() != 5 {
			t.Errorf("3 s in, 5 streams answered: %+v, answered %d; want the first probe running", st, l.Answered())
		}
		time.Sleep(27 * time.Second)
		stop()
		wg.Wait()
		if st := l.State(); !st.Measured || st.NoLoad != 200*time.Millisecond || st.Probes != 1 {
			t.Errorf("after 30 s of streams: %+v; want the first probe measured, noLoad 200ms", st)
		}
		checkCounts(t, l, 0, 0)
	})
}

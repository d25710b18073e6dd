package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
)

// gateCalls starts n calls through l whose fn runs step(i) and then waits
// for release; it returns how many are in fn, and the calls' errors.
func gateCalls(l *ratelimit.Limiter, n int, step func(i int), release <-chan struct{}) (*atomic.Int32, chan error) {
	var in atomic.Int32
	var order atomic.Int32
	errs := make(chan error, n)
	for range n {
		go func() {
			errs <- l.Execute(context.Background(), func(context.Context) error {
				in.Add(1)
				step(int(order.Add(1)))
				<-release
				return nil
			})
		}()
	}
	return &in, errs
}

// After a hold, one attempt goes first; each answer lets through as many
// more as it says the quota has left (less those already let through), so
// the calls that waited do not all land on a quota that is still low. An
// answer that comes while others let through are out may be older than
// theirs: it lowers what goes, never raises it; the last one out's answer
// says what the refill has added.
func TestGateLetsThroughWhatTheAnswersAllow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s"))
		// Refills of about a second: the timed release lets no one through
		// while the test runs.
		answer := func(n string) {
			observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", n, "x-ratelimit-reset-requests", "59s"))
		}
		const calls = 5
		var in, order atomic.Int32
		var releases [calls + 1]chan struct{}
		for i := range releases {
			releases[i] = make(chan struct{})
		}
		errs := make(chan error, calls)
		for range calls {
			go func() {
				errs <- l.Execute(context.Background(), func(context.Context) error {
					in.Add(1)
					i := order.Add(1)
					if i == 1 {
						answer("1") // the probe's: one left
					}
					<-releases[i]
					return nil
				})
			}()
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if got := in.Load(); got != 2 {
			t.Fatalf("%d calls in fn after the hold, want 2 (the probe and the one its answer allowed)", got)
		}
		// Two out: an answer saying 3 left may be the older one.
		answer("3")
		synctest.Wait()
		if got := in.Load(); got != 2 {
			t.Errorf("%d calls in fn after an answer with two out, want still 2", got)
		}
		// The probe ends (its answer has spoken): nobody more.
		close(releases[1])
		synctest.Wait()
		if got := in.Load(); got != 2 {
			t.Errorf("%d calls in fn after the probe ended, want still 2", got)
		}
		// The last one out's answer: 3 left, all for the three waiting.
		answer("3")
		synctest.Wait()
		if got := in.Load(); got != calls {
			t.Errorf("%d calls in fn, want %d", got, calls)
		}
		for _, r := range releases[2:] {
			close(r)
		}
		for range calls {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})
}

// A gated attempt that ends without an answer saying anything lets the
// next one through: on a failure or a panic, one more; on a success, all.
func TestGateAfterAnAttemptWithoutAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		l.HoldFor(time.Second)
		var mu sync.Mutex
		var ran []string
		run := func(name string, fn func() error) chan error {
			errc := make(chan error, 1)
			go func() {
				defer func() {
					if r := recover(); r != nil {
						errc <- errors.New("panicked")
					}
				}()
				errc <- l.Execute(context.Background(), func(context.Context) error {
					mu.Lock()
					ran = append(ran, name)
					mu.Unlock()
					return fn()
				})
			}()
			return errc
		}
		block := make(chan struct{})
		first := run("fails", func() error { <-block; return errors.New("reset by peer") })
		time.Sleep(time.Second)
		synctest.Wait()
		second := run("panics", func() error { <-block; panic("bug") })
		third := run("succeeds", func() error { <-block; return nil })
		rest := []chan error{run("a", func() error { return nil }), run("b", func() error { return nil })}
		synctest.Wait()
		if len(ran) != 1 {
			t.Fatalf("ran %v while the probe is out, want only it", ran)
		}
		close(block)
		for _, c := range append([]chan error{first, second, third}, rest...) {
			<-c
		}
		if len(ran) != 5 || ran[0] != "fails" {
			t.Errorf("ran %v", ran)
		}
	})
}

// Behind the gate an attempt waits for answers or the next timed release
// (one hold's length after the hold, while no answer has named a count),
// up to its deadline (not MaxWait, which bounds a hold): with no count
// heard, the probe's success may open the gate before the release, so one
// whose deadline comes first waits until its context ends: the caller's
// own deadline returns ctx.Err(), a Deadline's timer a rejection; a caller
// that gives up leaves no waiter behind; the release lets the next one
// through.
func TestGateWaitBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{MaxWait: 5 * time.Second})
		start := time.Now()
		l.HoldFor(3 * time.Second)
		release := make(chan struct{})
		defer close(release)
		probe := make(chan error, 1)
		go func() {
			probe <- l.Execute(context.Background(), func(context.Context) error { <-release; return nil })
		}()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		at := time.Now()
		err := l.Execute(ctx, func(context.Context) error { t.Error("ran behind the gate"); return nil })
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, policy.ErrRejected) || time.Since(at) != time.Second {
			t.Errorf("err = %v after %v, want ctx.Err() at the caller's deadline", err, time.Since(at))
		}
		ctx1, cancel1 := context.WithDeadlineCause(context.Background(), time.Now().Add(time.Second), deadline.ErrExceeded)
		defer cancel1()
		err = l.Execute(ctx1, func(context.Context) error { t.Error("ran behind the gate"); return nil })
		var re *policy.RejectedError
		if !errors.As(err, &re) || re.Reason != ratelimit.ReasonThrottled || time.Since(at) != 2*time.Second {
			t.Errorf("err = %v after %v, want a throttled rejection at the Deadline's timer", err, time.Since(at))
		}
		ctx2, cancel2 := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- l.Execute(ctx2, func(context.Context) error { t.Error("ran"); return nil }) }()
		synctest.Wait()
		cancel2()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("canceled waiter: %v", err)
		}
		ctx3, cancel3 := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel3()
		if err := l.Execute(ctx3, ok); err != nil {
			t.Errorf("err = %v, want the attempt let through by the timed release", err)
		}
		if d := time.Since(start); d != 6*time.Second {
			t.Errorf("let through at %v, want 6 s (a hold's length after the hold)", d)
		}
	})
}

// An answer that arrives during a hold (to an attempt sent before it) does
// not open the gate: when the hold ends, one attempt still goes first.
func TestGateStaysClosedDuringTheHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		observe(l, resp(429, "Retry-After", "1"))
		observe(l, resp(200))                                                                             // says nothing
		observe(l, resp(200, "x-ratelimit-remaining-requests", "50", "x-ratelimit-limit-requests", "60")) // plenty left
		release := make(chan struct{})
		in, errs := gateCalls(l, 3, func(int) {}, release)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := in.Load(); got != 1 {
			t.Errorf("%d calls in fn when the hold ended, want 1", got)
		}
		close(release)
		for range 3 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})
}

// MaxWait bounds each hold an attempt meets, counted from when it meets
// it: a hold set again while it waited behind the gate counts afresh.
func TestMaxWaitCountsPerHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{MaxWait: time.Second})
		start := time.Now()
		l.HoldFor(800 * time.Millisecond)
		release := make(chan struct{})
		var mu sync.Mutex
		var admitted []time.Duration
		errs := make(chan error, 2)
		for range 2 { // both meet the hold; one goes first when it ends
			go func() {
				errs <- l.Execute(context.Background(), func(context.Context) error {
					mu.Lock()
					admitted = append(admitted, time.Since(start))
					mu.Unlock()
					<-release
					return nil
				})
			}()
		}
		time.Sleep(1200 * time.Millisecond) // the first is out: the other waits behind the gate (until 1.6 s)
		observe(l, resp(429, "Retry-After-Ms", "900"))
		close(release)
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("err = %v: each hold was within MaxWait", err)
			}
		}
		if len(admitted) != 2 || admitted[0] != 800*time.Millisecond || admitted[1] != 2100*time.Millisecond {
			t.Errorf("admitted at %v, want [800ms 2.1s]", admitted)
		}
	})
}

// After a hold has ended, an answer to an attempt the gate never let through
// (sent before the hold) saying 0 left with a reset already past must not
// shut the gate for good: nothing the gate let through is out to give budget
// back, so one attempt goes.
func TestGateNotShutByAStaleAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{MaxHold: 200 * time.Millisecond})
		l.HoldFor(10 * time.Millisecond)
		time.Sleep(20 * time.Millisecond)
		observe(l, resp(200, "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "0s"))
		for i := range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := l.Execute(ctx, func(context.Context) error { return nil })
			cancel()
			if err != nil {
				t.Fatalf("call %d after the stale answer: %v; want it admitted", i+1, err)
			}
		}
	})
}

// The attempts asleep on a hold are waiting too: an answer that comes as
// the hold ends, before they have woken, lets through as many as it says
// are left, and does not open the gate under them (all ten would go onto
// a bucket with six). Either order of the answer and their waking is run,
// as synctest schedules them.
func TestGateCountsTheAttemptsHeld(t *testing.T) {
	for range 30 {
		synctest.Test(t, func(t *testing.T) {
			l := newLimiter(t, ratelimit.Config{})
			l.HoldFor(time.Second)
			release := make(chan struct{})
			in, errs := gateCalls(l, 10, func(int) {}, release)
			synctest.Wait()
			time.Sleep(time.Second) // the hold is over; the held may not have woken
			observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "6"))
			synctest.Wait()
			// Six, and the probe if it went before the answer (the answer,
			// not its own, did not count it).
			if got := in.Load(); got > 7 {
				t.Errorf("%d attempts let through on an answer saying 6 left", got)
			}
			close(release)
			for range 10 {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// A gated attempt that succeeds once answers name counts lets no one
// through as it ends: its own answer has said how many more may go. (Each
// success granted one more, and a batch let through on an answer went
// again, as large, onto a spent bucket.) When nothing let through is out,
// an end lets one go all the same, or no answer would ever come.
func TestGateSuccessGrantsNothingMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6s"))
		var in, order atomic.Int32
		release, probeEnd := make(chan struct{}), make(chan struct{})
		errs := make(chan error, 5)
		for range 5 {
			go func() {
				errs <- l.Execute(context.Background(), func(context.Context) error {
					in.Add(1)
					if order.Add(1) == 1 {
						// The probe: its answer says one is left; it ends
						// once that one has gone.
						observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "1", "x-ratelimit-reset-requests", "5.9s"))
						<-probeEnd
						return nil
					}
					<-release
					return nil
				})
			}()
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		close(probeEnd)
		synctest.Wait()
		if got := in.Load(); got != 2 {
			t.Errorf("%d attempts let through, want 2: the probe and the one its answer allowed", got)
		}
		close(release)
		for range 5 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		if got := in.Load(); got != 5 {
			t.Errorf("%d attempts ran in all, want 5", got)
		}
	})
}

// The gate opens on what is left for newcomers, not on the count an answer
// names: an answer saying 6 of 60 left (a tenth) while six more attempts
// let through are out, not yet counted, leaves nothing, and a newcomer
// still waits.
func TestGateOpensOnWhatIsLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6s"))
		answer := func(n string) {
			observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", n, "x-ratelimit-reset-requests", "5s"))
		}
		release := make(chan struct{})
		in, errs := gateCalls(l, 7, func(i int) {
			if i == 1 {
				answer("6") // the probe's: six more may go
			}
		}, release)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if got := in.Load(); got != 7 {
			t.Fatalf("%d attempts let through, want 7", got)
		}
		// One of the six's answer: 6 left, but the other five are out.
		answer("6")
		late := make(chan error, 1)
		go func() { late <- l.Execute(context.Background(), ok) }()
		synctest.Wait()
		select {
		case err := <-late:
			t.Fatalf("a newcomer ran (%v) while the attempts out take what is left", err)
		default:
		}
		close(release)
		for range 7 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		if err := <-late; err != nil {
			t.Error(err)
		}
	})
}

// An answer older than one already seen (its requests bucket full again
// sooner: fewer requests counted) is observed late, as answers on separate
// connections can be: its larger count lets no one more through, even
// from the last attempt out (whose answer otherwise says what is left).
func TestGateIgnoresAnOlderAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6s"))
		const calls = 6
		var in, order atomic.Int32
		var releases [calls + 1]chan struct{}
		for i := range releases {
			releases[i] = make(chan struct{})
		}
		errs := make(chan error, calls)
		for range calls {
			go func() {
				errs <- l.Execute(context.Background(), func(context.Context) error {
					in.Add(1)
					i := order.Add(1)
					if i == 1 { // the probe's answer: 1 left, full in 5.9 s
						observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "1", "x-ratelimit-reset-requests", "5.9s"))
					}
					<-releases[i]
					return nil
				})
			}()
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		close(releases[1]) // the probe ends: one out
		synctest.Wait()
		if got := in.Load(); got != 2 {
			t.Fatalf("%d attempts let through, want 2", got)
		}
		// Older: 5 left, full in 5.5 s (four fewer requests counted).
		observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "5", "x-ratelimit-reset-requests", "5.5s"))
		synctest.Wait()
		if got := in.Load(); got != 2 {
			t.Errorf("%d attempts let through after an older answer, want still 2", got)
		}
		// Newer, from the last one out: full in 6 s, 2 left.
		observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "2", "x-ratelimit-reset-requests", "6s"))
		synctest.Wait()
		if got := in.Load(); got != 4 {
			t.Errorf("%d attempts let through after a newer answer, want 4", got)
		}
		for _, r := range releases[2:] {
			close(r)
		}
		for range calls {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})
}

// Once answers have named counts, an attempt let through before a new hold
// that succeeds after it does not open the gate (as an attempt of a
// Limiter that hears no counts would): the attempts that waited out the
// hold still go one probe first.
func TestGateNotOpenedByAStraggler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6s"))
		relA := make(chan struct{})
		errA := make(chan error, 1)
		go func() {
			errA <- l.Execute(context.Background(), func(context.Context) error {
				observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "1", "x-ratelimit-reset-requests", "5.9s"))
				<-relA
				return nil
			})
		}()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		observe(l, resp(429, "Retry-After", "1")) // a new hold, A still out
		release := make(chan struct{})
		in, errs := gateCalls(l, 5, func(int) {}, release)
		time.Sleep(time.Second)
		synctest.Wait() // the hold is over: one probe went
		close(relA)     // A, let through before the hold, succeeds
		if err := <-errA; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := in.Load(); got != 1 {
			t.Errorf("%d attempts in fn after the straggler ended, want 1 (the probe)", got)
		}
		close(release)
		for range 5 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})
}

// OnReject runs holding no lock, also for a rejection the gate decides
// after a wait: a hook that asks the limiter about its hold returns.
func TestOnRejectAfterAGateWaitHoldsNoLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l *ratelimit.Limiter
		var held []time.Duration
		l = newLimiter(t, ratelimit.Config{MaxWait: 5 * time.Second, OnReject: func(context.Context, *policy.RejectedError) {
			held = append(held, l.Held())
		}})
		l.HoldFor(3 * time.Second)
		release := make(chan struct{})
		defer close(release)
		go l.Execute(context.Background(), func(context.Context) error { <-release; return nil })
		time.Sleep(3 * time.Second)
		synctest.Wait()
		ctx, cancel := context.WithDeadlineCause(context.Background(), time.Now().Add(2*time.Second), deadline.ErrExceeded)
		defer cancel()
		err := l.Execute(ctx, func(context.Context) error { t.Error("ran behind the gate"); return nil })
		if !errors.Is(err, ratelimit.ErrLimited) || len(held) != 1 {
			t.Fatalf("err = %v, OnReject saw %v; want a rejection seen once", err, held)
		}
	})
}

package compose_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// handOverPipeline is a pipeline of every kind of built-in slot.
func handOverPipeline(t *testing.T, failures uint32) (*compose.Pipeline, *bulkhead.Bulkhead, *breaker.Breaker) {
	t.Helper()
	bh, err := bulkhead.New(bulkhead.Config{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	dl, err := deadline.New(deadline.Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := retry.New(retry.Config{MaxAttempts: 3, NewSchedule: func() backoff.BackOff { return &backoff.ZeroBackOff{} }})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := breaker.New(breaker.Config{ConsecutiveFailures: failures, OpenTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bh.Close(); cb.Close() })
	p, err := compose.New("x", compose.Policies{Bulkhead: bh, Deadline: dl, Retry: rt, Breaker: cb, Attempt: dl})
	if err != nil {
		t.Fatal(err)
	}
	return p, bh, cb
}

// A call handed over keeps its bulkhead slot and its deadline's context
// until End, and the breaker judges the outcome End is given.
func TestHandedOverCallHoldsUntilEnd(t *testing.T) {
	p, bh, cb := handOverPipeline(t, 1)
	var fnCtx context.Context
	calls := 0
	held, err := p.Start(context.Background(), func(ctx context.Context) error {
		calls++
		fnCtx = ctx
		return compose.ErrHandOver
	})
	if err != nil || held == nil {
		t.Fatalf("Start = %v, %v; want a held call", held, err)
	}
	if bh.Active() != 1 || fnCtx.Err() != nil {
		t.Fatalf("after the hand-over: %d active, ctx.Err() %v; want 1 and nil", bh.Active(), fnCtx.Err())
	}
	boom := errors.New("stream cut")
	if err := held.End(boom); err != boom {
		t.Fatalf("End = %v, want the stream's error unchanged", err)
	}
	if calls != 1 {
		t.Errorf("fn ran %d times; a handed-over call is never retried", calls)
	}
	if bh.Active() != 0 || fnCtx.Err() == nil {
		t.Errorf("after End: %d active, ctx.Err() %v; want 0 and done", bh.Active(), fnCtx.Err())
	}
	if cb.State() != breaker.Open {
		t.Errorf("breaker %v after a failed stream; want open (ConsecutiveFailures 1)", cb.State())
	}
	defer func() {
		if recover() == nil {
			t.Error("a second End did not panic")
		}
	}()
	held.End(nil)
}

// Without a hand-over, Start is Execute.
func TestStartWithoutHandOverIsExecute(t *testing.T) {
	p, bh, _ := handOverPipeline(t, 5)
	boom := errors.New("boom")
	calls := 0
	held, err := p.Start(context.Background(), func(context.Context) error {
		calls++
		if calls < 2 {
			return boom
		}
		return nil
	})
	if held != nil || err != nil || calls != 2 || bh.Active() != 0 {
		t.Fatalf("Start = %v, %v after %d calls, %d active; want nil, nil, 2, 0", held, err, calls, bh.Active())
	}
}

// Under Execute, ErrHandOver is an error like any other: every slot is
// freed and the call fails with it.
func TestExecuteTreatsErrHandOverAsAnError(t *testing.T) {
	p, bh, _ := handOverPipeline(t, 5)
	err := p.Execute(context.Background(), func(context.Context) error { return compose.ErrHandOver })
	if !errors.Is(err, compose.ErrHandOver) || bh.Active() != 0 {
		t.Fatalf("Execute = %v with %d active; want ErrHandOver and 0", err, bh.Active())
	}
}

// lease is a policy of another package that holds something while its fn
// runs, as a lease held in Redis: it reports what fn returned to it.
type lease struct {
	held   atomic.Int32
	got    chan error
	panicV any // panics with it, if set, after fn returned
	exit   bool
}

func (l *lease) Execute(ctx context.Context, fn policy.Func) error {
	l.held.Add(1)
	defer l.held.Add(-1)
	err := fn(ctx)
	l.got <- err
	if l.exit {
		runtime.Goexit()
	}
	if l.panicV != nil {
		panic(l.panicV)
	}
	return err
}

// A policy of another package holds what it took across a hand-over: its
// fn waits for End's outcome, and End returns what its Execute returned.
func TestPolicyOfAnotherPackageHoldsUntilEnd(t *testing.T) {
	l := &lease{got: make(chan error, 1)}
	bh, err := bulkhead.New(bulkhead.Config{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer bh.Close()
	p, err := compose.New("x", compose.Policies{Bulkhead: bh, Breaker: l})
	if err != nil {
		t.Fatal(err)
	}
	held, err := p.Start(context.Background(), func(context.Context) error { return compose.ErrHandOver })
	if err != nil || held == nil {
		t.Fatalf("Start = %v, %v; want a held call", held, err)
	}
	if l.held.Load() != 1 || bh.Active() != 1 {
		t.Fatalf("after the hand-over: lease held %d, bulkhead %d; want 1, 1", l.held.Load(), bh.Active())
	}
	cut := errors.New("cut")
	if err := held.End(cut); err != cut {
		t.Errorf("End = %v; want %v", err, cut)
	}
	if got := <-l.got; got != cut || l.held.Load() != 0 || bh.Active() != 0 {
		t.Errorf("fn returned %v to the policy; held %d, bulkhead %d after End; want cut, 0, 0", got, l.held.Load(), bh.Active())
	}
}

// A panic or runtime.Goexit in a policy of another package under Start
// goes on up Start's caller before the hand-over, and up End's after; the
// slots above it are freed either way.
func TestPolicyOfAnotherPackagePanicsUnderStart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		handed bool
		exit   bool
	}{{"before", false, false}, {"after", true, false}, {"goexit before", false, true}, {"goexit after", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			l := &lease{got: make(chan error, 1), panicV: "lease", exit: tc.exit}
			bh, err := bulkhead.New(bulkhead.Config{Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer bh.Close()
			p, err := compose.New("x", compose.Policies{Bulkhead: bh, Breaker: l})
			if err != nil {
				t.Fatal(err)
			}
			fn := func(context.Context) error { return nil }
			if tc.handed {
				fn = func(context.Context) error { return compose.ErrHandOver }
			}
			var recovered any
			var returned bool
			var wg sync.WaitGroup
			wg.Go(func() {
				defer func() { recovered = recover() }()
				held, _ := p.Start(context.Background(), fn)
				if tc.handed {
					held.End(nil)
				}
				returned = true
			})
			wg.Wait()
			switch {
			case returned:
				t.Errorf("the caller returned")
			case tc.exit && recovered != nil, !tc.exit && recovered != "lease":
				t.Errorf("recovered %v", recovered)
			}
			if bh.Active() != 0 || l.held.Load() != 0 {
				t.Errorf("bulkhead %d, lease %d held after the panic", bh.Active(), l.held.Load())
			}
		})
	}
}

// A panic in fn under Start frees every slot and goes on.
func TestStartPanicFreesEverySlot(t *testing.T) {
	p, bh, _ := handOverPipeline(t, 5)
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Errorf("recovered %v", r)
			}
		}()
		p.Start(context.Background(), func(context.Context) error { panic("kaboom") })
	}()
	if bh.Active() != 0 {
		t.Errorf("%d active after a panic", bh.Active())
	}
}

// The call's span ends at End, with End's outcome.
func TestHandedOverSpanEndsAtEnd(t *testing.T) {
	sr, tp := newTracing(t)
	p, err := compose.New("llm", compose.Policies{}, compose.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	held, _ := p.Start(context.Background(), func(context.Context) error { return compose.ErrHandOver })
	if n := len(sr.Ended()); n != 0 {
		t.Fatalf("%d spans ended before End", n)
	}
	held.End(errors.New("cut"))
	if spans := sr.Ended(); len(spans) != 1 || spans[0].Status().Description != "cut" {
		t.Fatalf("spans %v; want the call's, with End's error", spans)
	}
}

// earlyPolicy runs fn on a goroutine of its own and returns once fn is
// about to hand the call over, without waiting for it (it should wait).
type earlyPolicy struct{ handing chan struct{} }

func (p earlyPolicy) Execute(ctx context.Context, fn policy.Func) error {
	go fn(ctx)
	<-p.handing
	return nil
}

// A policy that returns as its fn hands the call over neither deadlocks
// Start nor loses the hold: Start and End return, whichever of the two
// compose sees first.
func TestPolicyReturningAsFnHandsOver(t *testing.T) {
	for range 200 {
		pol := earlyPolicy{handing: make(chan struct{})}
		p, err := compose.New("x", compose.Policies{Breaker: pol})
		if err != nil {
			t.Fatal(err)
		}
		held, err := p.Start(context.Background(), func(context.Context) error {
			close(pol.handing)
			return compose.ErrHandOver
		})
		if err != nil {
			t.Fatal(err)
		}
		if held != nil {
			held.End(nil)
		}
	}
}

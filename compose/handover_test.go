package compose_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
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
	rt, err := retry.New(retry.Config{MaxAttempts: 3, NewSchedule: func() retry.Schedule {
		return retry.ScheduleFunc(func() (time.Duration, bool) { return 0, true })
	}})
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
	if !p.Holds() {
		t.Fatal("Holds = false for a pipeline of built-in policies")
	}
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

// A policy of another package does not hold across a hand-over.
func TestHoldsOnlyWithBuiltInPolicies(t *testing.T) {
	p, err := compose.New("x", compose.Policies{Breaker: &fakeStage{name: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Holds() {
		t.Error("Holds = true with a policy of another package")
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

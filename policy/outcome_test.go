package policy_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
)

// Every timeout of the module matches ErrTimeout and
// context.DeadlineExceeded, and none is a rejection.
func TestEveryTimeoutMatchesErrTimeout(t *testing.T) {
	for _, err := range []error{
		deadline.ErrExceeded,
		&deadline.ExceededError{Name: "x", Duration: time.Second},
		httppolicy.ErrFirstByteTimeout,
		httppolicy.ErrIdleTimeout,
		policy.ErrTimeout,
	} {
		if !errors.Is(err, policy.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, policy.ErrRejected) {
			t.Errorf("%v: Is ErrTimeout %v, Is DeadlineExceeded %v, Is ErrRejected %v; want true, true, false", err,
				errors.Is(err, policy.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, policy.ErrRejected))
		}
	}
}

// TimedOut tells a Deadline's timer from the caller's own end: its own
// deadline, a cancel, even a cancel whose cause is a timeout.
func TestTimedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, err := deadline.New(deadline.Config{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, timer := d.Start(context.Background())
		if policy.TimedOut(ctx) {
			t.Error("TimedOut before the timer fired")
		}
		<-ctx.Done()
		if !policy.TimedOut(ctx) {
			t.Error("not TimedOut after the Deadline's timer fired")
		}
		timer.Stop(nil)

		own, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		<-own.Done()
		caused, cancelCause := context.WithCancelCause(context.Background())
		cancelCause(policy.ErrTimeout)
		for _, c := range []context.Context{own, caused, context.Background()} {
			if policy.TimedOut(c) {
				t.Errorf("TimedOut(%v) = true for a caller's end", c)
			}
		}
	})
}

// ErrAborted is the outcome a two-step form's user reports for a call
// that panicked: a breaker counts it as a failure.
func TestErrAbortedIsAFailure(t *testing.T) {
	b, err := breaker.New(breaker.Config{ConsecutiveFailures: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p, err := b.Allow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.Done(policy.ErrAborted)
	if st := b.State(); st != breaker.Open {
		t.Errorf("state %v after an aborted call; want open", st)
	}
}

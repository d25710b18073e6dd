package retry

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
)

// TestHedgeUnderDeadlineKeepsRejection checks a Hedge inside a Deadline
// whose attempts are all held by a policy below (a rate limit) when the
// Deadline fires: fn never ran, each attempt ends with that policy's
// rejection, and the call ends with it, not with a timeout.
func TestHedgeUnderDeadlineKeepsRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedge(t, HedgeConfig{MaxHedges: 1, Delay: 100 * time.Millisecond})
		d, err := deadline.New(deadline.Config{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rej := policy.NewRejectedError("ratelimit", "llm", "throttled", policy.NewSentinel("ratelimit: limited"))
		err = d.Execute(context.Background(), func(ctx context.Context) error {
			return h.Execute(ctx, func(ctx context.Context) error {
				<-ctx.Done() // held until the Deadline fires
				return rej
			})
		})
		if !errors.Is(err, policy.ErrRejected) || errors.Is(err, deadline.ErrExceeded) {
			t.Errorf("err = %v, want the rejection and no timeout", err)
		}
	})
}

// TestHedgeStopsAtOnceOnCallersEnd checks the caller's side: when the
// caller's ctx ends, the call returns at once with ctx.Err(), without
// waiting for an attempt that ignores its context.
func TestHedgeStopsAtOnceOnCallersEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedge(t, HedgeConfig{MaxHedges: 1, Delay: 100 * time.Millisecond})
		release := make(chan struct{})
		defer close(release)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err := h.Execute(ctx, func(context.Context) error { <-release; return nil })
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Errorf("err = %v after %v, want DeadlineExceeded after 1s", err, time.Since(start))
		}
	})
}

// TestHedgeStopsAtOnceOnCancelWithDeadlineCause checks that a caller's
// cancel whose cause is a Deadline's error (as errgroup.WithContext cancels
// a group) still stops the call at once.
func TestHedgeStopsAtOnceOnCancelWithDeadlineCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedge(t, HedgeConfig{MaxHedges: 1, Delay: 100 * time.Millisecond})
		release := make(chan struct{})
		defer close(release)
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(time.Second, func() { cancel(&deadline.ExceededError{Name: "sibling"}) })
		start := time.Now()
		err := h.Execute(ctx, func(context.Context) error { <-release; return nil })
		if !errors.Is(err, context.Canceled) || time.Since(start) != time.Second {
			t.Errorf("err = %v after %v, want context.Canceled after 1s", err, time.Since(start))
		}
	})
}

// TestRetryAttemptRefusedByDeadlineEndsAsTimeout checks a Retry under a
// Deadline whose second attempt a policy below holds until the Deadline's
// timer fires: the policy ends the wait with ctx.Err() (fn ran in the
// call), and the call ends as our deadline, not as a retry that gave up
// nor as a rejection. A rejection decided before the timer fires ends the
// call as exhausted, which the Deadline returns unchanged.
func TestRetryAttemptRefusedByDeadlineEndsAsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := New(Config{MaxAttempts: 3, InitialInterval: time.Millisecond, Jitter: NoJitter})
		if err != nil {
			t.Fatal(err)
		}
		d, err := deadline.New(deadline.Config{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rej := policy.NewRejectedError("ratelimit", "llm", "throttled", policy.NewSentinel("ratelimit: limited"))
		n := 0
		err = d.Execute(context.Background(), func(ctx context.Context) error {
			return r.Execute(ctx, func(ctx context.Context) error {
				n++
				if n == 1 {
					return errBoom
				}
				<-ctx.Done() // held below until the Deadline fires
				return ctx.Err()
			})
		})
		if !errors.Is(err, deadline.ErrExceeded) || errors.Is(err, ErrExhausted) || errors.Is(err, policy.ErrRejected) {
			t.Errorf("err = %v, want our deadline, and nothing else", err)
		}
		n = 0
		err = d.Execute(context.Background(), func(ctx context.Context) error {
			return r.Execute(ctx, func(ctx context.Context) error {
				n++
				if n == 1 {
					return errBoom
				}
				time.Sleep(2 * time.Second) // the Deadline fires before the refusal reaches it
				return rej
			})
		})
		var ee *ExhaustedError
		if !errors.As(err, &ee) || ee.Reason != ReasonRejected || errors.Is(err, deadline.ErrExceeded) {
			t.Errorf("err = %v, want the retry's exhaustion by the rejection, unchanged", err)
		}
	})
}

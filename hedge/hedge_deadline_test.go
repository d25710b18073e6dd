package hedge

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
		h := mustHedge(t, Config{MaxHedges: 1, Delay: 100 * time.Millisecond})
		d, err := deadline.New(deadline.Config{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rej := policy.NewRejectedError("ratelimit", "llm", "throttled", policy.NewSentinel("ratelimit: limited"))
		err = d.Execute(context.Background(), func(ctx context.Context) error {
			return hedged(h, ctx, func(ctx context.Context) error {
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
		h := mustHedge(t, Config{MaxHedges: 1, Delay: 100 * time.Millisecond})
		release := make(chan struct{})
		defer close(release)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err := hedged(h, ctx, func(context.Context) error { <-release; return nil })
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
		h := mustHedge(t, Config{MaxHedges: 1, Delay: 100 * time.Millisecond})
		release := make(chan struct{})
		defer close(release)
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(time.Second, func() { cancel(&deadline.ExceededError{Name: "sibling"}) })
		start := time.Now()
		err := hedged(h, ctx, func(context.Context) error { <-release; return nil })
		if !errors.Is(err, context.Canceled) || time.Since(start) != time.Second {
			t.Errorf("err = %v after %v, want context.Canceled after 1s", err, time.Since(start))
		}
	})
}

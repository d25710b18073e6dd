package bulkhead

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
)

// TestWaitEndedByDeadlineIsRejection checks a Bulkhead inside a Deadline:
// a call whose wait the Deadline's timer ends never ran fn, so it is the
// bulkhead's rejection (Reason "wait_timeout"), not a timeout. The
// caller's own deadline ending the wait stays ctx.Err().
func TestWaitEndedByDeadlineIsRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rejects := 0
		b := mustNew(t, Config{Limit: 1, MaxQueue: 1, OnReject: func(context.Context, *policy.RejectedError) { rejects++ }})
		if _, _, err := b.Enter(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer b.Exit(context.Background(), Permit{}, nil)
		d, err := deadline.New(deadline.Config{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		err = d.Execute(context.Background(), func(ctx context.Context) error {
			return b.Execute(ctx, func(context.Context) error { ran = true; return nil })
		})
		var rej *policy.RejectedError
		if !errors.As(err, &rej) || rej.Reason != ReasonWaitTimeout || !errors.Is(err, ErrFull) || errors.Is(err, deadline.ErrExceeded) || ran || rejects != 1 {
			t.Errorf("err = %v, ran %v, rejects %d; want the wait_timeout rejection alone", err, ran, rejects)
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err = b.Execute(ctx, func(context.Context) error { ran = true; return nil })
		if err != context.DeadlineExceeded || ran || rejects != 1 {
			t.Errorf("caller's deadline: err = %v, ran %v, rejects %d; want context.DeadlineExceeded, no rejection", err, ran, rejects)
		}
	})
}

// TestWaitEndedByCallerWithDeadlineCause checks that a wait the caller's
// cancel ends stays ctx.Err() even when the cause is a Deadline's error (as
// errgroup.WithContext cancels a group with a sibling's error).
func TestWaitEndedByCallerWithDeadlineCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Limit: 1, MaxQueue: 1})
		if _, _, err := b.Enter(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer b.Exit(context.Background(), Permit{}, nil)
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(time.Second, func() { cancel(&deadline.ExceededError{Name: "sibling"}) })
		err := b.Execute(ctx, func(context.Context) error { return nil })
		if err != context.Canceled {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	})
}

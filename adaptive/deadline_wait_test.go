package adaptive_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
)

// TestWaitEndedByDeadlineIsRejection checks a Limiter inside a Deadline:
// a call whose wait the Deadline's timer ends never ran fn, so it is the
// limiter's rejection (Reason "wait_timeout"), not a timeout.
func TestWaitEndedByDeadlineIsRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{InitialLimit: 1, MinLimit: 1, MaxLimit: 1, MaxQueue: 1})
		release := make(chan struct{})
		go l.Execute(context.Background(), func(context.Context) error { <-release; return nil })
		synctest.Wait()
		defer func() { close(release); synctest.Wait() }()
		d, err := deadline.New(deadline.Config{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		err = d.Execute(context.Background(), func(ctx context.Context) error {
			return l.Execute(ctx, func(context.Context) error { ran = true; return nil })
		})
		var rej *policy.RejectedError
		if !errors.As(err, &rej) || rej.Reason != adaptive.ReasonWaitTimeout || !errors.Is(err, adaptive.ErrFull) || errors.Is(err, deadline.ErrExceeded) || ran {
			t.Errorf("err = %v, ran %v; want the wait_timeout rejection alone", err, ran)
		}
	})
}

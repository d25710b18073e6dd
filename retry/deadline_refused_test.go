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

// TestRetryAttemptRefusedByDeadlineEndsAsTimeout checks a Retry under a
// Deadline whose second attempt a policy below holds until the Deadline's
// timer fires: the policy ends the wait with ctx.Err() (fn ran in the
// call), and the call ends as our deadline, not as a retry that gave up
// nor as a rejection. A rejection decided before the timer fires ends the
// call as exhausted, which the Deadline returns unchanged.
func TestRetryAttemptRefusedByDeadlineEndsAsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := New(Config{MaxAttempts: 3, InitialInterval: time.Millisecond, Jitter: noJitter})
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

package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
)

// stuckShared is a shared quota whose Take does not answer before ctx
// ends (a round trip to a frozen store, say), and then returns ctx's
// error, as ratelimit.Shared allows.
type stuckShared struct{ fakeShared }

func (s *stuckShared) Take(ctx context.Context, cost int, by time.Time) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestSharedWaitEndedByDeadlineIsRejection: a Deadline's timer that ends
// ctx while the attempt waits in the Limiter (its shared quota included)
// ends it as the Limiter's Outcomes table says: rejected, fn never ran,
// not a timeout.
func TestSharedWaitEndedByDeadlineIsRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := ratelimit.New(ratelimit.Config{Shared: &stuckShared{}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		d, err := deadline.New(deadline.Config{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		p, err := compose.New("stuck", compose.Policies{Deadline: d, RateLimit: l})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		err = p.Execute(context.Background(), func(context.Context) error { ran = true; return nil })
		if ran {
			t.Fatal("fn ran")
		}
		if errors.Is(err, deadline.ErrExceeded) || !errors.Is(err, policy.ErrRejected) {
			t.Errorf("a wait in the shared quota ended by the Deadline's timer: Execute = %v (a timeout: %v), want a rejection matching ErrLimited",
				err, errors.Is(err, deadline.ErrExceeded))
		}
	})
}

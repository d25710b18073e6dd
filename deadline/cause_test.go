package deadline

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// TestCauseMatchesErrExceeded checks that fn can tell the Deadline's own
// firing from its caller's deadline by the cause of its ctx: the cause
// matches both ErrExceeded and context.DeadlineExceeded, and names the
// policy, while the caller's deadline matches only DeadlineExceeded.
func TestCauseMatchesErrExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := mustNew(t, Config{Name: "search", Timeout: time.Second})
		var cause error
		d.Execute(context.Background(), func(ctx context.Context) error {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ctx.Err()
		})
		if !errors.Is(cause, ErrExceeded) || !errors.Is(cause, context.DeadlineExceeded) {
			t.Errorf("Cause = %v: Is(ErrExceeded) = %v, Is(DeadlineExceeded) = %v, want both",
				cause, errors.Is(cause, ErrExceeded), errors.Is(cause, context.DeadlineExceeded))
		}
		if cause == nil || !strings.Contains(cause.Error(), `"search"`) {
			t.Errorf("Cause = %v, want it to name the Deadline", cause)
		}

		// The caller's own deadline, sooner than ours.
		parent, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		d.Execute(parent, func(ctx context.Context) error {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ctx.Err()
		})
		if errors.Is(cause, ErrExceeded) || !errors.Is(cause, context.DeadlineExceeded) {
			t.Errorf("caller's deadline: Cause = %v, want DeadlineExceeded and not ErrExceeded", cause)
		}
	})
}

// TestRejectionKeepsItsRow checks that a rejection returned by fn after the
// Deadline fired (an inner policy's wait cut by our timer) is returned
// unchanged: it matches policy.ErrRejected and not ErrExceeded, and no
// timeout is recorded.
func TestRejectionKeepsItsRow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp, reader := newMeter(t)
		d := mustNew(t, Config{Name: "call", Timeout: time.Second, MeterProvider: mp})
		rej := policy.NewRejectedError("ratelimit", "llm", "throttled", policy.NewSentinel("ratelimit: limited"))
		err := d.Execute(context.Background(), func(ctx context.Context) error {
			<-ctx.Done()
			return rej
		})
		if err != rej {
			t.Errorf("err = %v, want the rejection unchanged", err)
		}
		if errors.Is(err, ErrExceeded) {
			t.Errorf("err matches both ErrExceeded and policy.ErrRejected")
		}
		if got := collect(t, reader, telemetry.MetricTimeouts); len(got) != 0 {
			t.Errorf("watertight.timeouts = %v, want none", got)
		}
	})
}

// TestFired checks that Fired is true only for a ctx a Deadline's timer
// ended: not for the caller's own deadline, nor for a cancel whose cause is
// a Deadline's error (as errgroup.WithContext cancels a group), nor for a
// live ctx.
func TestFired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := mustNew(t, Config{Timeout: time.Second})
		var fired, live bool
		d.Execute(context.Background(), func(ctx context.Context) error {
			live = Fired(ctx)
			<-ctx.Done()
			fired = Fired(ctx)
			return ctx.Err()
		})
		if !fired || live {
			t.Errorf("Fired = %v while live, %v once the Deadline fired; want false, true", live, fired)
		}
		own, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		<-own.Done()
		if Fired(own) {
			t.Error("Fired is true for the caller's own context.WithTimeout")
		}
		group, cancelGroup := context.WithCancelCause(context.Background())
		cancelGroup(&ExceededError{Name: "sibling", Duration: time.Second})
		if Fired(group) {
			t.Error("Fired is true for a cancel whose cause is a Deadline's error")
		}
	})
}

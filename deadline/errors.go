package deadline

import (
	"context"
	"errors"
	"time"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// ErrExceeded is matched by every error a [Deadline] returns because its
// own timer fired, and by the cause ([context.Cause]) of the context it
// gave fn once it has. It matches [policy.ErrTimeout] and
// [context.DeadlineExceeded], and not [policy.ErrRejected]: fn ran.
var ErrExceeded error = sentinel{}

type sentinel struct{}

func (sentinel) Error() string { return "deadline: timeout exceeded" }
func (sentinel) Is(target error) bool {
	return target == policy.ErrTimeout || target == context.DeadlineExceeded
}
func (sentinel) Timeout() bool { return true }

// ExceededError is the error of a call cut short by a [Deadline]'s timer.
// It matches [ErrExceeded], [policy.ErrTimeout] and
// [context.DeadlineExceeded], and unwraps to fn's error. The zero value is
// a valid error.
type ExceededError struct {
	Name     string        // the Deadline's Config.Name
	Duration time.Duration // the Deadline's Config.Timeout
	Err      error         // fn's error, usually ctx.Err()
}

// Error returns a message such as
// `deadline "search": 2s timeout exceeded: context deadline exceeded`.
func (e *ExceededError) Error() string {
	msg := telemetry.Label("deadline", e.Name) + ": " + e.Duration.String() + " timeout exceeded"
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns fn's error.
func (e *ExceededError) Unwrap() error { return e.Err }

// Is reports whether target is one of the errors e matches.
func (e *ExceededError) Is(target error) bool {
	return target == ErrExceeded || target == policy.ErrTimeout || target == context.DeadlineExceeded
}

// Timeout returns true, as net.Error's Timeout.
func (e *ExceededError) Timeout() bool { return true }

// ErrorType returns "timeout", the error.type recorded in telemetry.
func (e *ExceededError) ErrorType() string { return telemetry.TypeTimeout }

// Fired reports whether ctx has ended because a Deadline's timer fired:
// [policy.TimedOut], with a cause that matches [ErrExceeded]. It is safe
// for concurrent use.
func Fired(ctx context.Context) bool {
	return policy.TimedOut(ctx) && errors.Is(context.Cause(ctx), ErrExceeded)
}

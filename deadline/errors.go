package deadline

import (
	"context"
	"strconv"
	"time"

	"github.com/watertight/watertight/internal/telemetry"
)

// ErrExceeded is matched, with [errors.Is], by every error a [Deadline]
// returns because its own timeout fired while fn ran (an [*ExceededError]).
// It is also matched by the cause ([context.Cause]) of the context fn is
// given once that timeout has fired, so fn can tell it from its caller's
// deadline. It matches [context.DeadlineExceeded] too. It does not match
// [policy.ErrRejected]: fn ran.
var ErrExceeded error = &sentinel{msg: "deadline: timeout exceeded"}

// newCause returns the cause of the contexts one Deadline creates: the one
// value by which it tells its own timer from the caller's cancellation
// or deadline. fn sees it through context.Cause; it matches ErrExceeded and
// context.DeadlineExceeded, and names the Deadline. Each Deadline has its
// own, because a cause propagates to child contexts: with a shared one, an
// inner Deadline (an attempt timeout) could take an outer Deadline's firing
// for its own.
func newCause(name string, timeout time.Duration) error {
	msg := "deadline"
	if name != "" {
		msg += " " + strconv.Quote(name)
	}
	return &sentinel{msg: msg + ": " + timeout.String() + " timeout"}
}

// sentinel is an error that matches ErrExceeded and context.DeadlineExceeded.
type sentinel struct{ msg string }

func (s *sentinel) Error() string { return s.msg }
func (s *sentinel) Is(target error) bool {
	return target == ErrExceeded || target == context.DeadlineExceeded
}
func (s *sentinel) Timeout() bool { return true }

// ExceededError is the error a [Deadline] returns when its own timeout fired
// and fn returned an error other than a rejection. It matches [ErrExceeded] and
// [context.DeadlineExceeded] with [errors.Is], and unwraps to fn's error.
//
// The zero value is a valid error with no name, duration or cause. An
// ExceededError is not modified after it is returned, so it may be read
// from several goroutines.
type ExceededError struct {
	// Name is the Config.Name of the Deadline that fired.
	Name string
	// Duration is the Config.Timeout of the Deadline that fired.
	Duration time.Duration
	// Err is the error fn returned, usually ctx.Err().
	Err error
}

// Error returns a message such as
// `deadline "search": 2s timeout exceeded: context deadline exceeded`.
func (e *ExceededError) Error() string {
	msg := "deadline"
	if e.Name != "" {
		msg += " " + strconv.Quote(e.Name)
	}
	msg += ": " + e.Duration.String() + " timeout exceeded"
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns fn's error.
func (e *ExceededError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrExceeded] or [context.DeadlineExceeded].
func (e *ExceededError) Is(target error) bool {
	return target == ErrExceeded || target == context.DeadlineExceeded
}

// Timeout reports true: the error is a timeout, in the sense of the
// net.Error interface.
func (e *ExceededError) Timeout() bool { return true }

// ErrorType returns "timeout", the error.type recorded in telemetry.
func (e *ExceededError) ErrorType() string { return telemetry.TypeTimeout }

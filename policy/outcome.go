package policy

import (
	"context"
	"errors"
	"time"
)

// ErrTimeout is matched by every error of a call that a timer of this
// module cut short while fn ran: a deadline.Deadline's, and a stream's
// first-byte or idle timeout. It is also matched by the cause
// ([context.Cause]) of a context such a timer ended. It matches
// [context.DeadlineExceeded], and not [ErrRejected]: fn ran.
var ErrTimeout error = timeout{}

type timeout struct{}

func (timeout) Error() string        { return "policy: timeout" }
func (timeout) Is(target error) bool { return target == context.DeadlineExceeded }
func (timeout) Timeout() bool        { return true }

// TimedOut reports whether ctx has ended because a timer of this module
// fired: ctx is done, its deadline has passed, and its cause matches
// [ErrTimeout]. A context canceled before its deadline has not timed out,
// even with such a cause, and neither has one whose own deadline passed
// (the caller's end). A wait that a timer ended before fn ran is a
// rejection; fn cut short by one is a timeout. It is safe for concurrent
// use.
func TimedOut(ctx context.Context) bool {
	if ctx.Err() == nil {
		return false
	}
	if at, ok := ctx.Deadline(); !ok || time.Now().Before(at) {
		return false
	}
	return errors.Is(context.Cause(ctx), ErrTimeout)
}

// ErrAborted is the outcome to give the second step of a two-step form
// (such as breaker.Permit.Done) when fn panicked or called runtime.Goexit:
// a breaker counts it as a failure, an adaptive limit samples nothing, and
// every policy frees what it holds. The panic then goes on up the stack.
var ErrAborted = errors.New("policy: fn panicked or exited its goroutine")

package stage

import (
	"context"

	"github.com/watertight/watertight/policy"
)

// RetryKey is the context key under which a retry's attempt answers a
// [RetryAttempt]. A hedge's attempts do not answer it: each is a call of
// its own.
type RetryKey struct{}

// RetryAttempt is one attempt of a retry: its number, from 1, and the
// context of the retry's call.
type RetryAttempt interface {
	Retry() (n int, call context.Context)
}

// WaitRefused reports whether a wait that ended with ctx is the waiting
// policy's rejection: a timer of this module ended ctx (policy.TimedOut),
// and fn never ran in the call that timer ended. After an earlier attempt
// of a retry below that timer ran fn, the call is the timer's timeout. A
// retry above the timer (an outer pipeline's) does not count.
func WaitRefused(ctx context.Context) bool {
	if !policy.TimedOut(ctx) {
		return false
	}
	r, ok := ctx.Value(RetryKey{}).(RetryAttempt)
	if !ok {
		return true
	}
	n, call := r.Retry()
	return n <= 1 || !policy.TimedOut(call)
}

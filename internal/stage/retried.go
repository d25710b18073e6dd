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

// Retried reports whether ctx belongs to a retry's attempt after its
// first, in a call that a timer of this module has ended: fn ran in an
// earlier attempt of the call the timer ended, so a wait the timer ends
// now makes that call a timeout, not a rejection. A retry above the
// Deadline that fired (an outer pipeline's) does not count.
func Retried(ctx context.Context) bool {
	r, ok := ctx.Value(RetryKey{}).(RetryAttempt)
	if !ok {
		return false
	}
	n, call := r.Retry()
	return n > 1 && policy.TimedOut(call)
}

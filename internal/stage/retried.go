package stage

import (
	"context"

	"github.com/watertight/watertight/policy"
)

// WaitRefused reports whether a wait that ended with ctx is the waiting
// policy's rejection: a timer of this module ended ctx (policy.TimedOut),
// and fn never ran in the call that timer ended. After an earlier attempt
// of a retry below that timer ran fn, the call is the timer's timeout. A
// retry above the timer (an outer pipeline's) does not count.
func WaitRefused(ctx context.Context) bool {
	if !policy.TimedOut(ctx) {
		return false
	}
	n, call := Retry(ctx)
	return n <= 1 || !policy.TimedOut(call)
}

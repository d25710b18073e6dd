package deadline

import (
	"context"
	"errors"
	"time"
)

// Fired reports whether ctx has ended because a Deadline's timer fired:
// ctx is done, its deadline has passed, and its cause ([context.Cause])
// matches [ErrExceeded]. A context canceled before its deadline, even with
// a Deadline's error as its cause (errgroup.WithContext cancels a group
// with the first error), has not fired. It is safe for concurrent use.
//
// The policies that tell our timeouts from the caller's own end use it: a
// breaker counts an attempt that Fired as a failure and excludes one whose
// ctx ended otherwise; a bulkhead, adaptive limit or rate limit whose wait
// a Deadline ended rejects the call.
func Fired(ctx context.Context) bool {
	if ctx.Err() == nil {
		return false
	}
	if at, ok := ctx.Deadline(); !ok || time.Now().Before(at) {
		return false
	}
	return errors.Is(context.Cause(ctx), ErrExceeded)
}

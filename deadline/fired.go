package deadline

import (
	"context"
	"errors"
	"time"
)

// Fired reports whether ctx has ended because a Deadline's timer fired:
// ctx is done, its deadline has passed, and its cause ([context.Cause])
// matches [ErrExceeded]. A context canceled before its deadline has not
// fired, even with a Deadline's error as its cause (as
// errgroup.WithContext cancels a group). It is safe for concurrent use.
//
// The policies use it to tell a Deadline's timeout from the caller's own
// end. A breaker counts an attempt that Fired as a failure and excludes
// one whose ctx ended otherwise. A bulkhead, adaptive limit or rate limit
// whose wait a Deadline ended rejects the call.
func Fired(ctx context.Context) bool {
	if ctx.Err() == nil {
		return false
	}
	if at, ok := ctx.Deadline(); !ok || time.Now().Before(at) {
		return false
	}
	return errors.Is(context.Cause(ctx), ErrExceeded)
}

package retry

import (
	"context"
)

// Next and AttemptContext give the tests the loop compose drives.
func (r *Retry) Next(ctx context.Context, n int, err error, state *call) (bool, *call, error) {
	return r.next(ctx, n, err, state)
}

func (r *Retry) AttemptContext(ctx context.Context, n int) context.Context {
	return r.attemptContext(ctx, n)
}

package stage

import "context"

// RetryKey is the context key under which a retry's attempt answers its
// number (an int, from 1). A hedge's attempts do not answer it: each is a
// call of its own.
type RetryKey struct{}

// Retried reports whether ctx belongs to a retry's attempt after its first:
// fn ran in an earlier attempt of the call, so a wait that a Deadline's
// timer ends now makes the call a timeout, not a rejection.
func Retried(ctx context.Context) bool {
	n, _ := ctx.Value(RetryKey{}).(int)
	return n > 1
}

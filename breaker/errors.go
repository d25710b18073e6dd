package breaker

import (
	"context"
	"errors"

	"github.com/watertight/watertight/policy"
)

// ErrOpen is matched by every rejection of a [Breaker], a
// [*policy.RejectedError] with Kind "breaker", and matches
// [policy.ErrRejected].
var ErrOpen = policy.NewSentinel("breaker: open")

// Rejection reasons: RejectedError.Reason and watertight.rejection.reason.
const (
	ReasonOpen         = "open"           // open, by its rules or forced
	ReasonHalfOpenFull = "half_open_full" // half-open, every probe taken
)

// DefaultIsFailure reports whether err is a failure of the dependency: it
// is not nil, a rejection ([policy.ErrRejected]), [context.Canceled],
// throttled ([policy.ErrThrottled]) or a spent quota
// ([policy.ErrQuotaSpent]). A timeout is a failure. It is safe
// for concurrent use.
func DefaultIsFailure(err error) bool {
	return err != nil && !excluded(context.Background(), err, true)
}

// The outcomes reported to gobreaker: nil for a success, errFailed for a
// failure, errNotRun for a call that counts as neither.
var (
	errFailed = errors.New("breaker: failure")
	errNotRun = errors.New("breaker: not counted")
)

// excluded reports whether a call whose ctx and error are ctx and err
// counts as neither a success nor a failure, whatever IsFailure says.
// throttled excludes a throttled error too.
func excluded(ctx context.Context, err error, throttled bool) bool {
	if ctx.Err() != nil && !policy.TimedOut(ctx) {
		return true
	}
	return err != nil && (errors.Is(err, policy.ErrRejected) || errors.Is(err, context.Canceled) ||
		throttled && (errors.Is(err, policy.ErrThrottled) || errors.Is(err, policy.ErrQuotaSpent)))
}

// report gives done the outcome of a call that ran with ctx and returned
// err (policy.ErrAborted if fn panicked), and ends the timing of call seq
// (0: not timed). If IsFailure panics, the call is reported as not
// counted, and the panic goes on.
func (b *Breaker) report(ctx context.Context, done func(error), seq uint64, err error) {
	out := errNotRun
	defer func() {
		if seq == 0 {
			done(out)
			return
		}
		// With the watch's lock held, so that no judgment sees the
		// outcome counted and the call still open.
		b.slow.end(seq, out != errNotRun, func() { done(out) })
	}()
	switch {
	case err == policy.ErrAborted:
		out = errFailed
	case excluded(ctx, err, b.throttled):
	case err == nil || !b.isFailure(err):
		out = nil
	default:
		out = errFailed
	}
}

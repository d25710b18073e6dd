package breaker

import (
	"context"
	"errors"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// verdict is how one admitted call counts.
type verdict int8

const (
	excludedCall verdict = iota // neither a success nor a failure
	succeeded
	failed
)

// errFailed is the outcome with which a failure is reported to gobreaker:
// the breaker judges each call itself (outcome), so gobreaker's
// IsSuccessful and IsExcluded only read the verdict back.
var errFailed = errors.New("breaker: failure")

// err is v as gobreaker's done func takes it.
func (v verdict) err() error {
	switch v {
	case succeeded:
		return nil
	case failed:
		return errFailed
	}
	return errNotRun
}

// outcome is the one place that decides how a call counts, given the ctx
// fn ran with and fn's error err. The first rule that applies decides: a
// panic or Goexit is a failure; once ctx has ended, and not because a
// Deadline's timer fired (deadline.Fired), the caller gave up or a hedge's
// attempt lost, and the call is excluded whatever fn returned; nil is a
// success; a rejection, context.Canceled and, with the default
// classification, a throttled error are excluded; then Config.IsFailure
// decides. It runs outside every lock.
func (b *Breaker) outcome(ctx context.Context, err error) verdict {
	switch {
	case err == stage.ErrAborted:
		return failed
	case ctx.Err() != nil && !deadline.Fired(ctx):
		return excludedCall
	case err == nil:
		return succeeded
	case excluded(err), b.throttled && errors.Is(err, policy.ErrThrottled):
		return excludedCall
	case b.isFailure(err):
		return failed
	}
	return succeeded
}

// report judges the call admitted with gobreaker's done func and reports
// the verdict to it. If IsFailure panics or calls runtime.Goexit, the
// deferred call reports the call as excluded, which frees a half-open
// probe's place, and the panic or Goexit goes on: nothing is recovered, so
// a panic need never be told from a Goexit.
func (b *Breaker) report(ctx context.Context, done func(error), err error) {
	v := excludedCall
	defer func() { done(v.err()) }()
	v = b.outcome(ctx, err)
}

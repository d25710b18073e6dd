package breaker

import (
	"context"
	"errors"

	"github.com/watertight/watertight/policy"
)

// ErrOpen is matched, with [errors.Is], by every rejection of a [Breaker]:
// open (by its rules or by [Breaker.ForceOpen]), or half-open with all its
// probes taken. It also matches [policy.ErrRejected]. The rejection itself
// is a [*policy.RejectedError] with Kind "breaker", the Breaker's Name and
// Reason "open" or "half_open_full".
var ErrOpen = policy.NewSentinel("breaker: open")

// Rejection reasons, the values of RejectedError.Reason and of the
// watertight.rejection.reason attribute.
const (
	// ReasonOpen: the breaker is open, by its rules or forced.
	ReasonOpen = "open"
	// ReasonHalfOpenFull: the breaker is half-open and its
	// [Config.HalfOpenRequests] probes are taken.
	ReasonHalfOpenFull = "half_open_full"
)

// DefaultIsFailure is the classification used when [Config.IsFailure] is
// nil. err is a failure of the dependency unless it is nil, a rejection
// ([policy.ErrRejected], from this breaker or a policy inside it),
// [context.Canceled], or throttled ([policy.ErrThrottled], a 429). A
// timeout is a failure, and so is a 503. It is safe for concurrent use.
//
// With IsFailure nil, the breaker excludes a throttled answer: neither a
// success nor a failure. So a burst of 429s neither opens the breaker on a
// healthy provider nor resets a run of consecutive 503s. A Config that
// sets IsFailure, even to DefaultIsFailure, counts a throttled answer as
// its IsFailure says (DefaultIsFailure: a success).
//
// The breaker asks IsFailure only about outcomes that may say something
// about the dependency: see Outcomes in the package documentation.
func DefaultIsFailure(err error) bool {
	return err != nil && !excluded(err) && !errors.Is(err, policy.ErrThrottled)
}

// excluded reports whether err says nothing about the dependency, so that
// the breaker counts it neither as a success nor as a failure, whatever
// Config.IsFailure says.
func excluded(err error) bool {
	return errors.Is(err, policy.ErrRejected) || errors.Is(err, context.Canceled)
}

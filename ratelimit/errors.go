package ratelimit

import "github.com/watertight/watertight/policy"

// Kind is the watertight.policy.kind and RejectedError.Kind of a Limiter.
const Kind = "ratelimit"

// Reasons a Limiter gives in [policy.RejectedError.Reason] and in the
// watertight.rejection.reason attribute.
const (
	ReasonThrottled = "throttled" // the wait for the hold or the gate would be too long
	ReasonRate      = "rate"      // the wait for the client-side rate would be too long
)

// ErrLimited is matched, with errors.Is, by every rejection a [Limiter]
// returns, whatever its reason; it also matches [policy.ErrRejected].
var ErrLimited = policy.NewSentinel("ratelimit: limited")

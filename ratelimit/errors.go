package ratelimit

import "github.com/watertight/watertight/policy"

// Kind is the watertight.policy.kind of every Limiter, and the Kind of its
// [policy.RejectedError]s.
const Kind = "ratelimit"

// Reasons a Limiter gives in [policy.RejectedError.Reason] and in the
// watertight.rejection.reason attribute.
const (
	// ReasonThrottled: the hold the server's signals set would outlast the
	// attempt's deadline or Config.MaxWait.
	ReasonThrottled = "throttled"
	// ReasonRate: the wait for the client-side rate (RequestsPerSecond,
	// TokensPerMinute) would.
	ReasonRate = "rate"
)

// ErrLimited is matched, with errors.Is, by every rejection a [Limiter]
// returns, whatever its reason; it also matches [policy.ErrRejected]. Use
// errors.As with a *[policy.RejectedError] to learn the Limiter's name and
// the reason.
var ErrLimited = policy.NewSentinel("ratelimit: limited")

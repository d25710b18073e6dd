package adaptive

import "github.com/watertight/watertight/policy"

// Kind is the watertight.policy.kind of every adaptive limiter, and the Kind
// of its [policy.RejectedError]s.
const Kind = "adaptive"

// Reasons a [Limiter] gives in [policy.RejectedError.Reason] and in the
// watertight.rejection.reason attribute: the same as package bulkhead's.
const (
	// ReasonFull: the limit was reached and the queue was full (or MaxQueue
	// is 0).
	ReasonFull = "full"
	// ReasonWaitTimeout: the call waited Config.MaxWait without being
	// admitted.
	ReasonWaitTimeout = "wait_timeout"
)

// ErrFull is matched, with errors.Is, by every rejection a [Limiter]
// returns, whatever its reason; it also matches [policy.ErrRejected]. Use
// errors.As with a *[policy.RejectedError] to learn the limiter's name and
// the reason.
var ErrFull = policy.NewSentinel("adaptive: full")

package bulkhead

import "github.com/watertight/watertight/policy"

// Kind is the watertight.policy.kind of every bulkhead, and the Kind of its
// [policy.RejectedError]s.
const Kind = "bulkhead"

// Reasons a bulkhead gives in [policy.RejectedError.Reason] and in the
// watertight.rejection.reason attribute.
const (
	// ReasonFull: every slot was taken and the queue was full (or MaxQueue
	// is 0).
	ReasonFull = "full"
	// ReasonWaitTimeout: the call waited Config.MaxWait without being given
	// a slot.
	ReasonWaitTimeout = "wait_timeout"
	// ReasonShed: the call waited, and a call of a higher priority took its
	// place in the full queue.
	ReasonShed = "shed"
)

// ErrFull is matched, with errors.Is, by every rejection a [Bulkhead]
// returns, whatever its reason; it also matches [policy.ErrRejected]. Use
// errors.As with a *[policy.RejectedError] to learn the bulkhead's name and
// the reason.
var ErrFull = policy.NewSentinel("bulkhead: full")

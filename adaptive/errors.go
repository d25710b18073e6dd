package adaptive

import "github.com/watertight/watertight/policy"

// Kind is the watertight.policy.kind and RejectedError.Kind of a Limiter.
const Kind = "adaptive"

// Reasons a [Limiter] gives in [policy.RejectedError.Reason] and in the
// watertight.rejection.reason attribute.
const (
	ReasonFull        = "full"         // the limit was reached and the queue was full
	ReasonWaitTimeout = "wait_timeout" // the call waited Config.MaxWait, or a Deadline's timer ended its wait
	ReasonShed        = "shed"         // the call waited, and one of a higher priority, or of a key with fewer waiters, took its place in the full queue
	ReasonKeyFull     = "key_full"     // its key held Config.MaxPerKey slots and the queue was full
)

// ErrFull is matched, with errors.Is, by every rejection a [Limiter]
// returns, whatever its reason; it also matches [policy.ErrRejected].
var ErrFull = policy.NewSentinel("adaptive: full")

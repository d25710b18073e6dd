package bulkhead

import "github.com/watertight/watertight/policy"

// Kind is the watertight.policy.kind and RejectedError.Kind of a Bulkhead.
const Kind = "bulkhead"

// Reasons a bulkhead gives in [policy.RejectedError.Reason] and in the
// watertight.rejection.reason attribute (see the Outcomes table).
const (
	ReasonFull        = "full"         // every slot taken and the queue full
	ReasonWaitTimeout = "wait_timeout" // MaxWait passed without a slot
	ReasonShed        = "shed"         // a higher priority, or a key with fewer waiters, took its place in the full queue
	ReasonKeyFull     = "key_full"     // its key held MaxPerKey slots and the queue was full
)

// ErrFull is matched, with errors.Is, by every rejection a [Bulkhead]
// returns, whatever its reason; it also matches [policy.ErrRejected].
var ErrFull = policy.NewSentinel("bulkhead: full")

package keyed

import "github.com/watertight/watertight/policy"

// Kind is the watertight.policy.kind and RejectedError.Kind of a Group.
const Kind = "keyed"

// Reasons a Group gives in [policy.RejectedError.Reason] and in the
// watertight.rejection.reason attribute.
const (
	ReasonNoKey      = "no_key"       // the call has no key
	ReasonKeyTooLong = "key_too_long" // its key is longer than Config.MaxKeyLen
	ReasonKeysFull   = "keys_full"    // MaxKeys keys are live and none may be evicted
)

// ErrNoPolicy is matched, with errors.Is, by every rejection a [Group]
// returns, whatever its reason; it also matches [policy.ErrRejected].
var ErrNoPolicy = policy.NewSentinel("keyed: no policy for the call's key")

// LabelOther is the label of every key that is not in Config.Labels.
const LabelOther = "other"

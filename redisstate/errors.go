package redisstate

// Kinds of this package's policies: the watertight.policy.kind attribute
// and the Kind of their rejections.
const (
	// KindBudget is the kind of a [Budget].
	KindBudget = "budget"
	// KindSharedBreaker is the kind of a [SharedBreaker]'s own telemetry
	// (its local breaker reports as kind "breaker").
	KindSharedBreaker = "shared_breaker"
)

// ReasonRedisUnavailable is the rejection reason of a [Budget] in the
// [FailClosed] mode while Redis cannot be asked. A Budget's other reasons
// are bulkhead.ReasonFull and bulkhead.ReasonWaitTimeout; every rejection
// of a Budget matches bulkhead.ErrFull and policy.ErrRejected.
const ReasonRedisUnavailable = "redis_unavailable"

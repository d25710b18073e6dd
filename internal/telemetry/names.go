package telemetry

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope of every meter and tracer.
const ScopeName = "github.com/watertight/watertight"

// Version is the instrumentation version of every meter and tracer: the
// module's version without the leading "v".
const Version = "0.1.0-dev"

// Attribute keys.
const (
	KeyKind        = attribute.Key("watertight.policy.kind")
	KeyName        = attribute.Key("watertight.policy.name")
	KeyReason      = attribute.Key("watertight.rejection.reason")
	KeyPriority    = attribute.Key("watertight.priority") // of a rejected call
	KeyPipeline    = attribute.Key("watertight.pipeline.name")
	KeyAttempt     = attribute.Key("watertight.retry.attempt")
	KeyState       = attribute.Key("watertight.breaker.state")
	KeyFrom        = attribute.Key("watertight.breaker.from")
	KeyWait        = attribute.Key("watertight.retry.wait")   // seconds, on watertight.retry events
	KeyRetryReason = attribute.Key("watertight.retry.reason") // why a retry gave up
	KeyError       = attribute.Key("error.type")
	KeyEndpoint    = attribute.Key("watertight.route.endpoint")
	KeyResult      = attribute.Key("watertight.update.result") // "applied" or "refused"
)

// Rejection reasons of the policies that admit calls through package slots.
const (
	ReasonFull        = "full"
	ReasonWaitTimeout = "wait_timeout"
	ReasonShed        = "shed"
	ReasonKeyFull     = "key_full"
)

// Span event names.
const (
	EventRejected = "watertight.rejected"
	EventTimeout  = "watertight.timeout"
	EventRetry    = "watertight.retry"
	EventState    = "watertight.breaker.transition"
)

// Values of KeyState and KeyFrom, as OpenTelemetry's state sets spell
// them.
const (
	StateClosed   = "closed"
	StateHalfOpen = "half_open"
	StateOpen     = "open"
)

// Instrument names.
const (
	MetricRejections   = "watertight.rejections"
	MetricTimeouts     = "watertight.timeouts"
	MetricAttempts     = "watertight.retry.attempts"
	MetricExhausted    = "watertight.retry.exhausted"
	MetricActive       = "watertight.bulkhead.active"
	MetricQueued       = "watertight.bulkhead.queued"
	MetricState        = "watertight.breaker.state"
	MetricTransitions  = "watertight.breaker.transitions"
	MetricSlow         = "watertight.breaker.slow"
	MetricCallDuration = "watertight.call.duration"
	MetricLimit        = "watertight.adaptive.limit"
	MetricHold         = "watertight.ratelimit.hold"
	MetricRoutePicks   = "watertight.route.picks"
	MetricEjections    = "watertight.route.ejections"
	MetricReturns      = "watertight.route.returns"
	MetricRouteLoad    = "watertight.route.load"
	MetricUpdates      = "watertight.config.updates"
)

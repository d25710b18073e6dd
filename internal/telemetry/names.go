package telemetry

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope of every meter and tracer: the
// module path.
const ScopeName = "github.com/watertight/watertight"

// Version is the instrumentation version of every meter and tracer
// (metric.WithInstrumentationVersion, trace.WithInstrumentationVersion): the
// version of the module that records the telemetry, without the leading "v"
// as OpenTelemetry's own instrumentation libraries report theirs. It changes
// with each release, so that a dashboard can tell the telemetry of two
// versions apart if an instrument's meaning ever changes.
const Version = "0.1.0-dev"

// Attribute keys, following OpenTelemetry's naming rules.
const (
	KeyKind     = attribute.Key("watertight.policy.kind")
	KeyName     = attribute.Key("watertight.policy.name")
	KeyReason   = attribute.Key("watertight.rejection.reason")
	KeyPipeline = attribute.Key("watertight.pipeline.name")
	KeyAttempt  = attribute.Key("watertight.retry.attempt")
	KeyState    = attribute.Key("watertight.breaker.state")
	KeyFrom     = attribute.Key("watertight.breaker.from")
	KeyWait     = attribute.Key("watertight.retry.wait") // seconds, on watertight.retry events
	KeyError    = attribute.Key("error.type")
)

// KeyRetryReason is the reason a retry gave up, on
// watertight.retry.exhausted (retry.ExhaustedError's Reason). It is not
// KeyReason, a rejection's reason.
const KeyRetryReason = attribute.Key("watertight.retry.reason")

// Span event names.
const (
	EventRejected = "watertight.rejected"
	EventTimeout  = "watertight.timeout"
	EventRetry    = "watertight.retry"
	EventState    = "watertight.breaker.transition"
)

// Values of KeyState and KeyFrom, the three states of a circuit breaker as
// telemetry names them: lowercase with underscores, as the attribute values
// of OpenTelemetry's state sets are (half_open, not half-open).
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
	MetricCallDuration = "watertight.call.duration"
	MetricLimit        = "watertight.adaptive.limit"
)

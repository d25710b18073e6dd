package telemetry

import (
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Instruments are the synchronous instruments of one policy or pipeline,
// taken from one MeterProvider. Instrument creation errors are reported to
// otel.Handle and leave a working no-op instrument in place, as the API
// promises: telemetry never fails a call or a constructor.
type Instruments struct {
	Meter        metric.Meter
	Rejections   metric.Int64Counter
	Timeouts     metric.Int64Counter
	Attempts     metric.Int64Counter
	Exhausted    metric.Int64Counter
	Transitions  metric.Int64Counter
	CallDuration metric.Float64Histogram
}

// DurationBuckets are the advisory bucket boundaries of
// watertight.call.duration, in seconds: the SDK's default boundaries
// (0, 5, 10, ... 10000) suit milliseconds and would put every call under
// five seconds in one bucket.
var DurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60}

// NewInstruments returns the instruments of mp, or of the global
// MeterProvider if mp is nil. Instruments taken from the global provider
// before an SDK is installed are connected to it when it is.
func NewInstruments(mp metric.MeterProvider) *Instruments {
	if mp == nil || isNilPointer(mp) {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
	in := &Instruments{Meter: m}
	var err error
	in.Rejections, err = m.Int64Counter(MetricRejections, metric.WithUnit("{call}"),
		metric.WithDescription("Calls refused before they ran, by policy and reason."))
	handle(err)
	in.Timeouts, err = m.Int64Counter(MetricTimeouts, metric.WithUnit("{call}"),
		metric.WithDescription("Calls cut short by a watertight deadline."))
	handle(err)
	in.Attempts, err = m.Int64Counter(MetricAttempts, metric.WithUnit("{attempt}"),
		metric.WithDescription("Retry attempts after the first."))
	handle(err)
	in.Exhausted, err = m.Int64Counter(MetricExhausted, metric.WithUnit("{call}"),
		metric.WithDescription("Calls on which a retry policy gave up."))
	handle(err)
	in.Transitions, err = m.Int64Counter(MetricTransitions, metric.WithUnit("{transition}"),
		metric.WithDescription("Circuit breaker state changes."))
	handle(err)
	in.CallDuration, err = m.Float64Histogram(MetricCallDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of calls through a watertight pipeline."),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	handle(err)
	return in
}

// isNilPointer reports whether v holds a nil pointer, such as a
// (*sdkmetric.MeterProvider)(nil) in a Config: treated as unset rather than
// left to panic in the first call, since New must never panic.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

func handle(err error) {
	if err != nil {
		otel.Handle(err)
	}
}

// AddOptions returns the options for a counter Add with the given
// attributes, built once so that the hot path adds no allocation.
func AddOptions(kv ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
}

// PolicyAttrs returns the kind and name attributes of a policy.
func PolicyAttrs(kind, name string) []attribute.KeyValue {
	return []attribute.KeyValue{KeyKind.String(kind), KeyName.String(name)}
}

// SlotCounters returns the watertight.bulkhead.active and
// watertight.bulkhead.queued observable up-down counters of m, which every
// policy that holds slots (bulkhead, adaptive) reports under its own kind
// and name: created in one place, so that they are described alike. Either
// is nil if its creation failed; the error goes to otel.Handle.
func SlotCounters(m metric.Meter) (active, queued metric.Int64ObservableUpDownCounter) {
	active, err := m.Int64ObservableUpDownCounter(MetricActive,
		metric.WithUnit("{call}"),
		metric.WithDescription("Calls holding a bulkhead slot."))
	handle(err)
	queued, err = m.Int64ObservableUpDownCounter(MetricQueued,
		metric.WithUnit("{call}"),
		metric.WithDescription("Calls waiting for a bulkhead slot."))
	handle(err)
	return active, queued
}

// LimitGauge returns the watertight.adaptive.limit observable gauge of m,
// or nil if its creation failed; the error goes to otel.Handle.
func LimitGauge(m metric.Meter) metric.Int64ObservableGauge {
	g, err := m.Int64ObservableGauge(MetricLimit,
		metric.WithUnit("{call}"),
		metric.WithDescription("The limit an adaptive concurrency limit has learned; a probe caps admission lower for a while."))
	handle(err)
	return g
}

// BreakerStateGauge returns the watertight.breaker.state observable gauge of
// m, or nil if its creation failed; the error goes to otel.Handle. It is a
// state set: a breaker reports one point per state, its KeyState attribute
// StateClosed, StateHalfOpen or StateOpen, 1 for the state it is in and 0
// for the others, so that a query selects a state by its name rather than
// by a number.
func BreakerStateGauge(m metric.Meter) metric.Int64ObservableGauge {
	g, err := m.Int64ObservableGauge(MetricState,
		metric.WithUnit("{state}"),
		metric.WithDescription("Circuit breaker state, as a state set: 1 for the state in watertight.breaker.state that the breaker is in, 0 for the others."))
	handle(err)
	return g
}

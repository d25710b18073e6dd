package telemetry

import (
	"slices"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/nilcheck"
)

// Instruments are the synchronous instruments of one policy or pipeline.
// An instrument that fails to be created, here or by the functions of this
// file, is reported to otel.Handle and left a working no-op.
type Instruments struct {
	Meter        metric.Meter
	Rejections   metric.Int64Counter
	Timeouts     metric.Int64Counter
	Attempts     metric.Int64Counter
	Exhausted    metric.Int64Counter
	Transitions  metric.Int64Counter
	CallDuration metric.Float64Histogram
}

// durationBuckets are the bucket boundaries of watertight.call.duration,
// in seconds: the SDK's default suits milliseconds.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60}

// MeterOf returns the watertight meter of mp, or of the global
// MeterProvider if mp is nil or holds a nil pointer.
func MeterOf(mp metric.MeterProvider) metric.Meter {
	if mp == nil || nilcheck.Pointer(mp) {
		mp = otel.GetMeterProvider()
	}
	return mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
}

// NewInstruments returns the instruments of [MeterOf] mp.
func NewInstruments(mp metric.MeterProvider) *Instruments {
	m := MeterOf(mp)
	return &Instruments{
		Meter:       m,
		Rejections:  Counter(m, MetricRejections, "{call}", "Calls refused before they ran, by policy and reason."),
		Timeouts:    Counter(m, MetricTimeouts, "{call}", "Calls cut short by a watertight deadline."),
		Attempts:    Counter(m, MetricAttempts, "{attempt}", "Retry attempts after the first."),
		Exhausted:   Counter(m, MetricExhausted, "{call}", "Calls on which a retry policy gave up."),
		Transitions: Counter(m, MetricTransitions, "{transition}", "Circuit breaker state changes."),
		CallDuration: handle(m.Float64Histogram(MetricCallDuration, metric.WithUnit("s"),
			metric.WithDescription("Duration of calls through a watertight pipeline."),
			metric.WithExplicitBucketBoundaries(durationBuckets...))),
	}
}

// Counter returns the counter name of m.
func Counter(m metric.Meter, name, unit, desc string) metric.Int64Counter {
	return handle(m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc)))
}

// handle reports err, if any, to otel.Handle and returns v.
func handle[T any](v T, err error) T {
	if err != nil {
		otel.Handle(err)
	}
	return v
}

// AddOptions returns the options of a counter Add with the attributes kv,
// built once so that adding allocates nothing.
func AddOptions(kv ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
}

// PolicyAttrs returns the kind and name attributes of a policy.
func PolicyAttrs(kind, name string) []attribute.KeyValue {
	return []attribute.KeyValue{KeyKind.String(kind), KeyName.String(name)}
}

// SlotCounters returns the watertight.bulkhead.active and
// watertight.bulkhead.queued observable up-down counters of m.
func SlotCounters(m metric.Meter) (active, queued metric.Int64ObservableUpDownCounter) {
	return handle(m.Int64ObservableUpDownCounter(MetricActive, metric.WithUnit("{call}"),
			metric.WithDescription("Calls holding a bulkhead slot."))),
		handle(m.Int64ObservableUpDownCounter(MetricQueued, metric.WithUnit("{call}"),
			metric.WithDescription("Calls waiting for a bulkhead slot.")))
}

// LimitGauge returns the watertight.adaptive.limit observable gauge of m.
func LimitGauge(m metric.Meter) metric.Int64ObservableGauge {
	return handle(m.Int64ObservableGauge(MetricLimit, metric.WithUnit("{call}"),
		metric.WithDescription("The limit an adaptive concurrency limit has learned; a probe caps admission lower for a while.")))
}

// HoldGauge returns the watertight.ratelimit.hold observable gauge of m.
func HoldGauge(m metric.Meter) metric.Float64ObservableGauge {
	return handle(m.Float64ObservableGauge(MetricHold, metric.WithUnit("s"),
		metric.WithDescription("Time left on a rate limit's hold, 0 when none is in force.")))
}

// BreakerStateGauge returns the watertight.breaker.state observable gauge
// of m, a state set: one point per state (KeyState), 1 for the current one.
func BreakerStateGauge(m metric.Meter) metric.Int64ObservableGauge {
	return handle(m.Int64ObservableGauge(MetricState, metric.WithUnit("{state}"),
		metric.WithDescription("Circuit breaker state, as a state set: 1 for the state in watertight.breaker.state that the breaker is in, 0 for the others.")))
}

// Observers is the registration of a policy's observable instruments. Its
// zero value holds none.
type Observers struct {
	once sync.Once
	reg  metric.Registration // nil if registration failed
}

// Register registers f as the callback of insts, unless one is nil. An
// error goes to otel.Handle, as telemetry never fails a constructor.
func (o *Observers) Register(m metric.Meter, f metric.Callback, insts ...metric.Observable) {
	if slices.Contains(insts, nil) {
		return
	}
	reg, err := m.RegisterCallback(f, insts...)
	if err != nil {
		otel.Handle(err)
		return
	}
	o.reg = reg
}

// Close unregisters the instruments, once; an error goes to otel.Handle.
// It is safe for concurrent use and returns nil.
func (o *Observers) Close() error {
	o.once.Do(func() {
		if o.reg != nil {
			if err := o.reg.Unregister(); err != nil {
				otel.Handle(err)
			}
		}
	})
	return nil
}

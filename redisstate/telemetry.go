package redisstate

import (
	"context"
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/policy"
)

// Telemetry names of this package, beside the library's own.
const (
	// MetricFallbacks counts the calls (and, for a shared breaker, the
	// reports and polls) that ran on a fallback because Redis could not be
	// asked.
	MetricFallbacks = "watertight.redis.fallbacks"
	// EventFallback is the span event added for each of them.
	EventFallback = "watertight.redis.fallback"
	// KeyMode is the fallback mode attribute.
	KeyMode = attribute.Key("watertight.redis.fallback.mode")
)

// The library's telemetry names that this package records under too. They
// are the root module's, spelled out here so that this module imports none
// of its internal packages: they must stay equal to those.
const (
	// scopeName and scopeVersion are the instrumentation scope of the
	// library's meters.
	scopeName    = "github.com/watertight/watertight"
	scopeVersion = "0.1.0-dev"

	keyKind   = attribute.Key("watertight.policy.kind")
	keyName   = attribute.Key("watertight.policy.name")
	keyReason = attribute.Key("watertight.rejection.reason")

	eventRejected    = "watertight.rejected"
	metricRejections = "watertight.rejections"
	metricActive     = "watertight.bulkhead.active"
	metricQueued     = "watertight.bulkhead.queued"
)

// meterOf returns the library's meter of mp, or of the global
// MeterProvider if mp is nil or holds a nil pointer (such as a
// (*sdkmetric.MeterProvider)(nil) in a config).
func meterOf(mp metric.MeterProvider) metric.Meter {
	if mp == nil {
		mp = otel.GetMeterProvider()
	} else if v := reflect.ValueOf(mp); v.Kind() == reflect.Pointer && v.IsNil() {
		mp = otel.GetMeterProvider()
	}
	return mp.Meter(scopeName, metric.WithInstrumentationVersion(scopeVersion))
}

// handle reports a telemetry error: telemetry never fails a call or a
// constructor.
func handle(err error) {
	if err != nil {
		otel.Handle(err)
	}
}

// policyAttrs returns the kind and name attributes of a policy.
func policyAttrs(kind, name string) []attribute.KeyValue {
	return []attribute.KeyValue{keyKind.String(kind), keyName.String(name)}
}

// addOptions returns the options of a counter's Add with the attributes
// kv, built once so that recording allocates nothing.
func addOptions(kv ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
}

// rejectionCounter returns the watertight.rejections counter of m, or nil
// if its creation failed.
func rejectionCounter(m metric.Meter) metric.Int64Counter {
	c, err := m.Int64Counter(metricRejections, metric.WithUnit("{call}"),
		metric.WithDescription("Calls refused before they ran, by policy and reason."))
	handle(err)
	return c
}

// slotCounters returns the watertight.bulkhead.active and
// watertight.bulkhead.queued observable up-down counters of m, described
// as the library's bulkheads describe them. Either is nil if its creation
// failed.
func slotCounters(m metric.Meter) (active, queued metric.Int64ObservableUpDownCounter) {
	active, err := m.Int64ObservableUpDownCounter(metricActive,
		metric.WithUnit("{call}"),
		metric.WithDescription("Calls holding a bulkhead slot."))
	handle(err)
	queued, err = m.Int64ObservableUpDownCounter(metricQueued,
		metric.WithUnit("{call}"),
		metric.WithDescription("Calls waiting for a bulkhead slot."))
	handle(err)
	return active, queued
}

// rejection is one way a policy refuses calls, prepared once: the error,
// the counter's attribute set and the span event's attributes. Recording
// it allocates nothing unless the span in ctx is recording.
type rejection struct {
	err     *policy.RejectedError
	counter metric.Int64Counter
	opts    []metric.AddOption
	event   []attribute.KeyValue
}

// newRejection prepares the rejection of policy (kind, name) for reason,
// matching sentinel with errors.Is, counted on counter.
func newRejection(counter metric.Int64Counter, kind, name, reason string, sentinel error) *rejection {
	kv := []attribute.KeyValue{keyKind.String(kind), keyName.String(name), keyReason.String(reason)}
	return &rejection{
		err:     policy.NewRejectedError(kind, name, reason, sentinel),
		counter: counter,
		opts:    addOptions(kv...),
		event:   kv,
	}
}

// record counts the rejection, adds a watertight.rejected event to the
// span in ctx if it is recording, and returns the rejection's error.
func (r *rejection) record(ctx context.Context) error {
	if r.counter != nil {
		r.counter.Add(ctx, 1, r.opts...)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(eventRejected, trace.WithAttributes(r.event...))
	}
	return r.err
}

// fallbackRecord counts fallbacks of one policy in one mode, prepared once.
type fallbackRecord struct {
	counter metric.Int64Counter
	opts    []metric.AddOption
	event   []attribute.KeyValue
}

func newFallbackRecord(m metric.Meter, kind, name, mode string) *fallbackRecord {
	c, err := m.Int64Counter(MetricFallbacks, metric.WithUnit("{call}"),
		metric.WithDescription("Calls or reports that ran on a fallback because Redis could not be asked."))
	handle(err)
	kv := append(policyAttrs(kind, name), KeyMode.String(mode))
	return &fallbackRecord{counter: c, opts: addOptions(kv...), event: kv}
}

// record counts one fallback and adds an event to the span in ctx if it
// is recording.
func (f *fallbackRecord) record(ctx context.Context) {
	if f.counter != nil {
		f.counter.Add(ctx, 1, f.opts...)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(EventFallback, trace.WithAttributes(f.event...))
	}
}

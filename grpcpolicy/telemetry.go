package grpcpolicy

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// The stream timeouts add to the same counter, and the same span event,
// as every other watertight timeout, under a scope of this package's own.
// The names are the documented ones (the core module's telemetry), spelled
// here so that this module uses only the core's public API.
const (
	scopeName     = "github.com/watertight/watertight/grpcpolicy"
	version       = "0.1.0-dev"
	metricTimeout = "watertight.timeouts"
	eventTimeout  = "watertight.timeout"
)

var (
	keyKind = attribute.Key("watertight.policy.kind")
	keyName = attribute.Key("watertight.policy.name")
)

// timeoutCounter returns the watertight.timeouts counter of mp (of the
// global MeterProvider if nil). An error is reported to otel.Handle and
// leaves a no-op counter: telemetry never fails a constructor.
func timeoutCounter(mp metric.MeterProvider) metric.Int64Counter {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	c, err := mp.Meter(scopeName, metric.WithInstrumentationVersion(version)).Int64Counter(metricTimeout, metric.WithUnit("{call}"),
		metric.WithDescription("Calls cut short by a watertight deadline."))
	if err != nil {
		otel.Handle(err)
	}
	return c
}

// timeoutRecord is one kind of stream timeout's telemetry, prepared once
// so that recording allocates nothing.
type timeoutRecord struct {
	counter metric.Int64Counter
	opts    []metric.AddOption
	event   []attribute.KeyValue
}

func newTimeoutRecord(counter metric.Int64Counter, kind, name string) *timeoutRecord {
	kv := []attribute.KeyValue{keyKind.String(kind), keyName.String(name)}
	return &timeoutRecord{
		counter: counter,
		opts:    []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))},
		event:   kv,
	}
}

// record counts a timeout and adds a watertight.timeout event to the span
// in ctx if it is recording.
func (r *timeoutRecord) record(ctx context.Context) {
	if r.counter != nil {
		r.counter.Add(ctx, 1, r.opts...)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(eventTimeout, trace.WithAttributes(r.event...))
	}
}

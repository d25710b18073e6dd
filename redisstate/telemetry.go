package redisstate

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/internal/telemetry"
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

// fallbackRecord counts fallbacks of one policy in one mode, prepared once.
type fallbackRecord struct {
	counter metric.Int64Counter
	opts    []metric.AddOption
	event   []attribute.KeyValue
}

func newFallbackRecord(m metric.Meter, kind, name, mode string) *fallbackRecord {
	c, err := m.Int64Counter(MetricFallbacks, metric.WithUnit("{call}"),
		metric.WithDescription("Calls or reports that ran on a fallback because Redis could not be asked."))
	if err != nil {
		otel.Handle(err)
	}
	kv := append(telemetry.PolicyAttrs(kind, name), KeyMode.String(mode))
	return &fallbackRecord{counter: c, opts: telemetry.AddOptions(kv...), event: kv}
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

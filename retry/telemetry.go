package retry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/internal/telemetry"
)

// recorder holds the telemetry of one Retry.
type recorder struct {
	prefix    string // for error messages: kind and quoted name
	attempts  metric.Int64Counter
	exhausted metric.Int64Counter
	kind      attribute.KeyValue
	name      attribute.KeyValue
	opts      []metric.AddOption // kind and name, built once
}

func newRecorder(mp metric.MeterProvider, name string) recorder {
	const kind = "retry"
	in := telemetry.NewInstruments(mp)
	rec := recorder{
		prefix:    telemetry.Label(kind, name),
		attempts:  in.Attempts,
		exhausted: in.Exhausted,
		kind:      telemetry.KeyKind.String(kind),
		name:      telemetry.KeyName.String(name),
	}
	rec.opts = telemetry.AddOptions(rec.kind, rec.name)
	return rec
}

// scheduled adds to the span in ctx, if it is recording, the event of
// attempt, to run after wait.
func (rec *recorder) scheduled(ctx context.Context, attempt int, wait time.Duration) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(telemetry.EventRetry, trace.WithAttributes(rec.kind, rec.name,
			telemetry.KeyAttempt.Int(attempt), telemetry.KeyWait.Float64(wait.Seconds())))
	}
}

// exhaust counts a call given up on for reason.
func (rec *recorder) exhaust(ctx context.Context, reason string) {
	rec.exhausted.Add(ctx, 1, metric.WithAttributes(rec.kind, rec.name, telemetry.KeyRetryReason.String(reason)))
}

package hedge

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/internal/telemetry"
)

// The telemetry names of a Hedge, which the package documentation lists.
const (
	kind            = "hedge"
	metricHedges    = "watertight.hedges"
	keyOutcome      = attribute.Key("watertight.hedge.outcome")
	eventHedge      = "watertight.hedge"
	keyAfterFailure = attribute.Key("watertight.hedge.after_failure")
)

// Outcomes of a hedge (an attempt after a call's first), in keyOutcome.
const (
	won      = "won"      // its success is the call's
	lost     = "lost"     // another attempt won while it ran
	canceled = "canceled" // the call ended otherwise while it ran
	failed   = "failed"   // it failed before the call ended
)

// recorder holds the telemetry of one Hedge.
type recorder struct {
	prefix    string // for error messages: kind and quoted name
	exhausted metric.Int64Counter
	hedges    metric.Int64Counter
	kind      attribute.KeyValue
	name      attribute.KeyValue
}

func newRecorder(mp metric.MeterProvider, name string) recorder {
	in := telemetry.NewInstruments(mp)
	rec := recorder{
		prefix:    telemetry.Label(kind, name),
		exhausted: in.Exhausted,
		kind:      telemetry.KeyKind.String(kind),
		name:      telemetry.KeyName.String(name),
	}
	rec.hedges = telemetry.Counter(in.Meter, metricHedges, "{attempt}",
		"Hedged attempts (attempts started beside a call's first), by outcome.")
	return rec
}

// started adds the event of hedge n to the span in ctx, if it is recording.
func (rec *recorder) started(ctx context.Context, n int, afterFailure bool) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(eventHedge, trace.WithAttributes(rec.kind, rec.name, telemetry.KeyAttempt.Int(n), keyAfterFailure.Bool(afterFailure)))
	}
}

// exhaust counts a call given up on for reason.
func (rec *recorder) exhaust(ctx context.Context, reason string) {
	rec.exhausted.Add(ctx, 1, metric.WithAttributes(rec.kind, rec.name, telemetry.KeyRetryReason.String(reason)))
}

func (rec *recorder) outcome(ctx context.Context, o string) {
	rec.hedges.Add(ctx, 1, metric.WithAttributes(rec.kind, rec.name, keyOutcome.String(o)))
}

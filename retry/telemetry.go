package retry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/internal/telemetry"
)

// Kind is the watertight.policy.kind of a Retry.
const Kind = "retry"

// HedgeKind is the watertight.policy.kind of a Hedge.
const HedgeKind = "hedge"

// KeyReason, "watertight.retry.reason", carries the [ExhaustedError]'s
// Reason on watertight.retry.exhausted.
const KeyReason = telemetry.KeyRetryReason

// Outcomes of a hedge (an attempt after a Hedge's first), in
// watertight.hedge.outcome.
const (
	HedgeWon      = "won"      // its success is the call's
	HedgeLost     = "lost"     // another attempt won while it ran
	HedgeCanceled = "canceled" // the call ended otherwise while it ran
	HedgeFailed   = "failed"   // it failed before the call ended
)

// Telemetry names of a Hedge.
const (
	// MetricHedges counts hedges by outcome.
	MetricHedges = "watertight.hedges"
	// KeyHedgeOutcome is the outcome of a hedge on watertight.hedges.
	KeyHedgeOutcome = attribute.Key("watertight.hedge.outcome")
	// EventHedge is the span event of a hedge's start, with its attempt
	// number and KeyHedgeAfterFailure.
	EventHedge = "watertight.hedge"
	// KeyHedgeAfterFailure is true when a failure, not the delay, started
	// the hedge.
	KeyHedgeAfterFailure = attribute.Key("watertight.hedge.after_failure")
)

// recorder holds the telemetry of one Retry or Hedge.
type recorder struct {
	prefix    string // for error messages: kind and quoted name
	attempts  metric.Int64Counter
	exhausted metric.Int64Counter
	hedges    metric.Int64Counter // nil for a Retry
	kind      attribute.KeyValue
	name      attribute.KeyValue
	opts      []metric.AddOption // kind and name, built once
}

func newRecorder(mp metric.MeterProvider, kind, name string) recorder {
	in := telemetry.NewInstruments(mp)
	rec := recorder{
		prefix:    label(kind, name),
		attempts:  in.Attempts,
		exhausted: in.Exhausted,
		kind:      telemetry.KeyKind.String(kind),
		name:      telemetry.KeyName.String(name),
	}
	rec.opts = telemetry.AddOptions(rec.kind, rec.name)
	if kind == HedgeKind {
		var err error
		rec.hedges, err = in.Meter.Int64Counter(MetricHedges, metric.WithUnit("{attempt}"),
			metric.WithDescription("Hedged attempts (attempts started beside a call's first), by outcome."))
		if err != nil {
			otel.Handle(err)
		}
	}
	return rec
}

// event adds a span event to the span in ctx, if it is recording.
func (rec *recorder) event(ctx context.Context, name string, attempt int, kv attribute.KeyValue) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(name, trace.WithAttributes(rec.kind, rec.name, telemetry.KeyAttempt.Int(attempt), kv))
	}
}

// scheduled records that attempt will run after wait.
func (rec *recorder) scheduled(ctx context.Context, attempt int, wait time.Duration) {
	rec.event(ctx, telemetry.EventRetry, attempt, telemetry.KeyWait.Float64(wait.Seconds()))
}

// exhaust counts a call given up on for reason.
func (rec *recorder) exhaust(ctx context.Context, reason string) {
	rec.exhausted.Add(ctx, 1, metric.WithAttributes(rec.kind, rec.name, KeyReason.String(reason)))
}

// outcome counts a hedge's outcome.
func (rec *recorder) outcome(ctx context.Context, o string) {
	rec.hedges.Add(ctx, 1, metric.WithAttributes(rec.kind, rec.name, KeyHedgeOutcome.String(o)))
}

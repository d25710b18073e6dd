package hedge

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/retry"
)

// Kind is the watertight.policy.kind of a Hedge.
const Kind = "hedge"

// Outcomes of a hedge (an attempt after a call's first), in [KeyOutcome].
const (
	Won      = "won"      // its success is the call's
	Lost     = "lost"     // another attempt won while it ran
	Canceled = "canceled" // the call ended otherwise while it ran
	Failed   = "failed"   // it failed before the call ended
)

// Telemetry names of a Hedge.
const (
	// Metric counts hedges by outcome.
	Metric = "watertight.hedges"
	// KeyOutcome is the outcome of a hedge on watertight.hedges.
	KeyOutcome = attribute.Key("watertight.hedge.outcome")
	// Event is the span event of a hedge's start, with its attempt number
	// and KeyAfterFailure.
	Event = "watertight.hedge"
	// KeyAfterFailure is true when a failure, not the delay, started the
	// hedge.
	KeyAfterFailure = attribute.Key("watertight.hedge.after_failure")
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
		prefix:    Kind,
		exhausted: in.Exhausted,
		kind:      telemetry.KeyKind.String(Kind),
		name:      telemetry.KeyName.String(name),
	}
	if name != "" {
		rec.prefix += " " + strconv.Quote(name)
	}
	var err error
	rec.hedges, err = in.Meter.Int64Counter(Metric, metric.WithUnit("{attempt}"),
		metric.WithDescription("Hedged attempts (attempts started beside a call's first), by outcome."))
	if err != nil {
		otel.Handle(err)
	}
	return rec
}

// started adds the Event of hedge n to the span in ctx, if it is recording.
func (rec *recorder) started(ctx context.Context, n int, afterFailure bool) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(Event, trace.WithAttributes(rec.kind, rec.name, telemetry.KeyAttempt.Int(n), KeyAfterFailure.Bool(afterFailure)))
	}
}

// exhaust counts a call given up on for reason.
func (rec *recorder) exhaust(ctx context.Context, reason string) {
	rec.exhausted.Add(ctx, 1, metric.WithAttributes(rec.kind, rec.name, retry.KeyReason.String(reason)))
}

// outcome counts a hedge's outcome.
func (rec *recorder) outcome(ctx context.Context, o string) {
	rec.hedges.Add(ctx, 1, metric.WithAttributes(rec.kind, rec.name, KeyOutcome.String(o)))
}

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

// Kind is the watertight.policy.kind of every Retry (on its counters and
// span events).
const Kind = "retry"

// KeyReason, "watertight.retry.reason", is the attribute with which
// watertight.retry.exhausted carries the [ExhaustedError]'s Reason. It is
// not watertight.rejection.reason, a rejection's reason.
const KeyReason = telemetry.KeyRetryReason

// reasons are the Reasons of an ExhaustedError, in the order of
// recorder.exhaustOpts.
var reasons = [...]string{ReasonMaxAttempts, ReasonStopped, ReasonDeadline, ReasonRetryAfter, ReasonRejected, ReasonBudget}

// recorder holds the telemetry of one Retry, prepared at New so that
// recording builds no attribute set per call.
type recorder struct {
	attempts  metric.Int64Counter
	exhausted metric.Int64Counter
	opts      []metric.AddOption
	// exhaustOpts holds, for each reason in reasons, the options of
	// watertight.retry.exhausted: kind, name and watertight.retry.reason.
	exhaustOpts [len(reasons)][]metric.AddOption
	kind        attribute.KeyValue
	name        attribute.KeyValue
}

// newRecorder returns the recorder of a policy of kind (Kind or
// HedgeKind) named name, with instruments from in.
func newRecorder(in *telemetry.Instruments, kind, name string) recorder {
	rec := recorder{
		attempts:  in.Attempts,
		exhausted: in.Exhausted,
		kind:      telemetry.KeyKind.String(kind),
		name:      telemetry.KeyName.String(name),
	}
	rec.opts = telemetry.AddOptions(rec.kind, rec.name)
	for i, reason := range reasons {
		rec.exhaustOpts[i] = telemetry.AddOptions(rec.kind, rec.name, KeyReason.String(reason))
	}
	return rec
}

// scheduled adds a watertight.retry event to the span in ctx, if it is
// recording, for attempt number attempt (2 or more) to run after wait.
func (rec *recorder) scheduled(ctx context.Context, attempt int, wait time.Duration) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(telemetry.EventRetry, trace.WithAttributes(
			rec.kind, rec.name,
			telemetry.KeyAttempt.Int(attempt),
			telemetry.KeyWait.Float64(wait.Seconds()),
		))
	}
}

// attempt counts an attempt after the first, once its wait is over: an
// attempt whose wait the caller canceled never runs and is not counted.
func (rec *recorder) attempt(ctx context.Context) {
	rec.attempts.Add(ctx, 1, rec.opts...)
}

// exhaust counts a call given up on for reason, one of reasons.
func (rec *recorder) exhaust(ctx context.Context, reason string) {
	for i, r := range reasons {
		if r == reason {
			rec.exhausted.Add(ctx, 1, rec.exhaustOpts[i]...)
			return
		}
	}
	panic("retry: unknown exhaustion reason " + reason) // unreachable: reasons are constants of this package
}

// HedgeKind is the watertight.policy.kind of every Hedge.
const HedgeKind = "hedge"

// Outcomes of a hedge (an attempt after the first of a [Hedge]'s call), in
// the watertight.hedge.outcome attribute of watertight.hedges.
const (
	// HedgeWon: the hedge's success is the call's.
	HedgeWon = "won"
	// HedgeLost: another attempt won while the hedge ran.
	HedgeLost = "lost"
	// HedgeCanceled: the call ended otherwise while the hedge ran (the
	// caller's context, another attempt's fatal error).
	HedgeCanceled = "canceled"
	// HedgeFailed: the hedge failed on its own before the call ended.
	HedgeFailed = "failed"
)

// Telemetry names of a Hedge, for dashboards and tests.
const (
	// MetricHedges counts hedges by outcome: "watertight.hedges".
	MetricHedges = "watertight.hedges"
	// KeyHedgeOutcome is the outcome of a hedge on watertight.hedges:
	// "watertight.hedge.outcome".
	KeyHedgeOutcome = attribute.Key("watertight.hedge.outcome")
	// EventHedge is the span event a hedge's start adds to the span in
	// the call's ctx, with its attempt number and whether a failure
	// (rather than the delay) started it: "watertight.hedge".
	EventHedge = "watertight.hedge"
	// KeyHedgeAfterFailure says, on a watertight.hedge event, that a
	// failure started the hedge: "watertight.hedge.after_failure".
	KeyHedgeAfterFailure = attribute.Key("watertight.hedge.after_failure")
)

var hedgeOutcomes = [...]string{HedgeWon, HedgeLost, HedgeCanceled, HedgeFailed}

// hedgeRecorder holds the telemetry of one Hedge, prepared at NewHedge.
type hedgeRecorder struct {
	recorder
	hedges      metric.Int64Counter
	outcomeOpts [len(hedgeOutcomes)][]metric.AddOption
}

func newHedgeRecorder(mp metric.MeterProvider, name string) hedgeRecorder {
	in := telemetry.NewInstruments(mp)
	rec := hedgeRecorder{recorder: newRecorder(in, HedgeKind, name), hedges: hedgeCounter(in.Meter)}
	for i, o := range hedgeOutcomes {
		rec.outcomeOpts[i] = telemetry.AddOptions(rec.kind, rec.name, KeyHedgeOutcome.String(o))
	}
	return rec
}

// hedgeCounter returns the watertight.hedges counter of m; if its
// creation fails, the error goes to otel.Handle and the counter returned
// is the no-op one the API leaves in its place.
func hedgeCounter(m metric.Meter) metric.Int64Counter {
	c, err := m.Int64Counter(MetricHedges, metric.WithUnit("{attempt}"),
		metric.WithDescription("Hedged attempts (attempts started beside a call's first), by outcome."))
	if err != nil {
		otel.Handle(err)
	}
	return c
}

// started adds a watertight.hedge event to the span in ctx, if it is
// recording, for hedge attempt number attempt.
func (rec *hedgeRecorder) started(ctx context.Context, attempt int, afterFailure bool) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(EventHedge, trace.WithAttributes(
			rec.kind, rec.name,
			telemetry.KeyAttempt.Int(attempt),
			KeyHedgeAfterFailure.Bool(afterFailure),
		))
	}
}

// outcome counts a hedge's outcome, one of hedgeOutcomes.
func (rec *hedgeRecorder) outcome(ctx context.Context, o string) {
	for i, x := range hedgeOutcomes {
		if x == o {
			rec.hedges.Add(ctx, 1, rec.outcomeOpts[i]...)
			return
		}
	}
	panic("retry: unknown hedge outcome " + o) // unreachable: outcomes are constants of this package
}

package retry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/internal/telemetry"
)

// Kind is the watertight.policy.kind of every Retry (on its counters and
// span events).
const Kind = "retry"

// KeyReason is the attribute that watertight.retry.exhausted carries with
// the [ExhaustedError]'s Reason ("max_attempts", "budget", ...), beside
// watertight.policy.kind and watertight.policy.name.
const KeyReason = attribute.Key("watertight.retry.reason")

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

func newRecorder(mp metric.MeterProvider, name string) recorder {
	in := telemetry.NewInstruments(mp)
	rec := recorder{
		attempts:  in.Attempts,
		exhausted: in.Exhausted,
		opts:      telemetry.AddOptions(telemetry.PolicyAttrs(Kind, name)...),
		kind:      telemetry.KeyKind.String(Kind),
		name:      telemetry.KeyName.String(name),
	}
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

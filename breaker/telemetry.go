package breaker

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/internal/telemetry"
)

// recorder holds the telemetry of one Breaker, prepared at New so that
// recording builds no attribute set.
type recorder struct {
	transitions metric.Int64Counter
	toOpts      [3][]metric.AddOption // by the new state
	gaugeOpt    metric.ObserveOption
	kind, name  attribute.KeyValue
}

func newRecorder(in *telemetry.Instruments, name string) recorder {
	rec := recorder{
		transitions: in.Transitions,
		kind:        telemetry.KeyKind.String(Kind),
		name:        telemetry.KeyName.String(name),
	}
	for s := Closed; s <= Open; s++ {
		rec.toOpts[s] = telemetry.AddOptions(rec.kind, rec.name, telemetry.KeyState.String(s.String()))
	}
	rec.gaugeOpt = metric.WithAttributeSet(attribute.NewSet(rec.kind, rec.name))
	return rec
}

// transition counts a change and adds a watertight.breaker.transition event
// to the span in ctx if it is recording.
func (rec *recorder) transition(ctx context.Context, from, to State) {
	if to >= Closed && to <= Open {
		rec.transitions.Add(ctx, 1, rec.toOpts[to]...)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(telemetry.EventState, trace.WithAttributes(
			rec.kind, rec.name,
			telemetry.KeyFrom.String(from.String()),
			telemetry.KeyState.String(to.String()),
		))
	}
}

// registerGauge registers the watertight.breaker.state gauge, observing
// state. It returns nil if that failed (reported to otel.Handle).
func (rec *recorder) registerGauge(m metric.Meter, state func() State) metric.Registration {
	g, err := m.Int64ObservableGauge(telemetry.MetricState, metric.WithUnit("{state}"),
		metric.WithDescription("Circuit breaker state: 0 closed, 1 half-open, 2 open."))
	if err != nil {
		otel.Handle(err)
		return nil
	}
	opt := rec.gaugeOpt
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(g, int64(state()), opt)
		return nil
	}, g)
	if err != nil {
		otel.Handle(err)
		return nil
	}
	return reg
}

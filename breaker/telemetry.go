package breaker

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/internal/telemetry"
)

const numStates = 3

// stateValues are the telemetry names of the States.
var stateValues = [numStates]string{telemetry.StateClosed, telemetry.StateHalfOpen, telemetry.StateOpen}

// recorder holds one Breaker's attribute sets, built at New.
type recorder struct {
	transitions metric.Int64Counter
	slowCalls   metric.Int64Counter // nil without a slow rule
	slowOpts    []metric.AddOption
	toOpts      [numStates][numStates][]metric.AddOption // by from, to
	stateOpts   [numStates]metric.ObserveOption
	kind, name  attribute.KeyValue
}

func newRecorder(in *telemetry.Instruments, name string) recorder {
	rec := recorder{
		transitions: in.Transitions,
		kind:        telemetry.KeyKind.String(Kind),
		name:        telemetry.KeyName.String(name),
	}
	rec.slowOpts = telemetry.AddOptions(rec.kind, rec.name)
	for s := range numStates {
		state := telemetry.KeyState.String(stateValues[s])
		rec.stateOpts[s] = metric.WithAttributeSet(attribute.NewSet(rec.kind, rec.name, state))
		for from := range numStates {
			rec.toOpts[from][s] = telemetry.AddOptions(rec.kind, rec.name,
				telemetry.KeyFrom.String(stateValues[from]), state)
		}
	}
	return rec
}

// transition counts a change and adds a watertight.breaker.transition
// event to the span in ctx if it is recording. It ignores an invalid State.
func (rec *recorder) transition(ctx context.Context, from, to State) {
	if uint(from) >= numStates || uint(to) >= numStates {
		return
	}
	rec.transitions.Add(ctx, 1, rec.toOpts[from][to]...)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(telemetry.EventState, trace.WithAttributes(
			rec.kind, rec.name,
			telemetry.KeyFrom.String(stateValues[from]),
			telemetry.KeyState.String(stateValues[to]),
		))
	}
}

// registerGauge registers on obs the watertight.breaker.state state set,
// observing state.
func (rec *recorder) registerGauge(m metric.Meter, obs *telemetry.Observers, state func() State) {
	g := telemetry.BreakerStateGauge(m)
	obs.Register(m, func(_ context.Context, o metric.Observer) error {
		cur := state()
		for s := range numStates {
			var v int64
			if State(s) == cur {
				v = 1
			}
			o.ObserveInt64(g, v, rec.stateOpts[s])
		}
		return nil
	}, g)
}

// slow counts a call judged slow.
func (rec *recorder) slow(ctx context.Context) {
	rec.slowCalls.Add(ctx, 1, rec.slowOpts...)
}

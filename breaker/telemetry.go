package breaker

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/internal/telemetry"
)

// numStates is the number of States, Closed through Open.
const numStates = int(Open) + 1

// stateValues are the values of the watertight.breaker.state and
// watertight.breaker.from attributes, by State: telemetry names half-open
// half_open, as OpenTelemetry's state sets do, while State.String keeps the
// hyphen of the breaker's own messages.
var stateValues = [numStates]string{
	Closed:   telemetry.StateClosed,
	HalfOpen: telemetry.StateHalfOpen,
	Open:     telemetry.StateOpen,
}

// recorder holds the telemetry of one Breaker, prepared at New so that
// recording builds no attribute set.
type recorder struct {
	transitions metric.Int64Counter
	// toOpts are the transitions counter's options by the state left and
	// the state entered.
	toOpts [numStates][numStates][]metric.AddOption
	// stateOpts are the state set's options, one per state.
	stateOpts  [numStates]metric.ObserveOption
	kind, name attribute.KeyValue
}

func newRecorder(in *telemetry.Instruments, name string) recorder {
	rec := recorder{
		transitions: in.Transitions,
		kind:        telemetry.KeyKind.String(Kind),
		name:        telemetry.KeyName.String(name),
	}
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

// valid reports whether s is one of the three States.
func valid(s State) bool { return s >= Closed && s <= Open }

// transition counts a change from from to to and adds a
// watertight.breaker.transition event to the span in ctx if it is
// recording.
func (rec *recorder) transition(ctx context.Context, from, to State) {
	if !valid(from) || !valid(to) {
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

// registerGauge registers the watertight.breaker.state state set, observing
// state: 1 for the state it returns, 0 for the other two. It returns nil if
// that failed (reported to otel.Handle).
func (rec *recorder) registerGauge(m metric.Meter, state func() State) metric.Registration {
	g := telemetry.BreakerStateGauge(m)
	if g == nil {
		return nil
	}
	opts := rec.stateOpts
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		cur := state()
		for s := range numStates {
			var v int64
			if State(s) == cur {
				v = 1
			}
			o.ObserveInt64(g, v, opts[s])
		}
		return nil
	}, g)
	if err != nil {
		otel.Handle(err)
		return nil
	}
	return reg
}

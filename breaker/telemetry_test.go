package breaker

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/watertight/watertight/internal/telemetry"
)

func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
		defer mp.Shutdown(context.Background())
		b, err := New(Config{Name: "llm", ConsecutiveFailures: 2, OpenTimeout: 10 * time.Second, MeterProvider: mp})
		if err != nil {
			t.Fatal(err)
		}
		policyAttrs := []string{string(telemetry.KeyKind), "breaker", string(telemetry.KeyName), "llm"}
		withState := func(s string) string { return attrs(append(policyAttrs, string(telemetry.KeyState), s)...) }
		// The state set: 1 for the current state, 0 for the two others.
		stateSet := func(cur string) map[string]int64 {
			m := map[string]int64{}
			for _, s := range []string{"closed", "half_open", "open"} {
				m[withState(s)] = 0
			}
			m[withState(cur)] = 1
			return m
		}
		type tr struct{ from, to string }
		transitions := func(counts map[tr]int64) map[string]int64 {
			m := map[string]int64{}
			for k, n := range counts {
				m[attrs(append(policyAttrs, string(telemetry.KeyFrom), k.from, string(telemetry.KeyState), k.to)...)] = n
			}
			return m
		}
		reason := func(s string) string { return attrs(append(policyAttrs, string(telemetry.KeyReason), s)...) }
		check := func(step string, state string, trans map[tr]int64, rejections map[string]int64) {
			t.Helper()
			if got, want := points(t, r, telemetry.MetricState), stateSet(state); !equalMaps(got, want) {
				t.Fatalf("%s: state set = %v, want %v", step, got, want)
			}
			if got, want := points(t, r, telemetry.MetricTransitions), transitions(trans); !equalMaps(got, want) {
				t.Fatalf("%s: transitions = %v, want %v", step, got, want)
			}
			if got := points(t, r, telemetry.MetricRejections); !equalMaps(got, rejections) {
				t.Fatalf("%s: rejections = %v, want %v", step, got, rejections)
			}
		}

		check("new", "closed", nil, nil)
		call(b, errBoom)
		call(b, errBoom)
		call(b, nil)
		call(b, nil)
		check("tripped", "open", map[tr]int64{{"closed", "open"}: 1}, map[string]int64{reason("open"): 2})

		time.Sleep(10 * time.Second)
		// No call: collecting the state set moves it on.
		check("timed out", "half_open", map[tr]int64{{"closed", "open"}: 1, {"open", "half_open"}: 1},
			map[string]int64{reason("open"): 2})

		ctx, tok, err := b.Enter(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		call(b, nil)
		b.Exit(ctx, tok, nil)
		check("closed", "closed", map[tr]int64{{"closed", "open"}: 1, {"open", "half_open"}: 1, {"half_open", "closed"}: 1},
			map[string]int64{reason("open"): 2, reason("half_open_full"): 1})

		b.ForceOpen()
		check("forced", "open", map[tr]int64{{"closed", "open"}: 2, {"open", "half_open"}: 1, {"half_open", "closed"}: 1},
			map[string]int64{reason("open"): 2, reason("half_open_full"): 1})
		b.Reset()
		check("reset", "closed", map[tr]int64{{"closed", "open"}: 2, {"open", "half_open"}: 1, {"half_open", "closed"}: 1, {"open", "closed"}: 1},
			map[string]int64{reason("open"): 2, reason("half_open_full"): 1})

		if err := b.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if got := points(t, r, telemetry.MetricState); len(got) != 0 {
			t.Fatalf("state set after Close: %v", got)
		}
		// Still works after Close, with its counters.
		call(b, errBoom)
		call(b, errBoom)
		if err, _ := call(b, nil); err == nil {
			t.Fatal("not open after Close and two failures")
		}
		if got := points(t, r, telemetry.MetricRejections)[reason("open")]; got != 3 {
			t.Fatalf("rejections after Close = %d, want 3", got)
		}
	})
}

func TestSpanEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		defer tp.Shutdown(context.Background())
		b := newBreaker(t, Config{Name: "llm", ConsecutiveFailures: 1})

		ctx, span := tp.Tracer("test").Start(context.Background(), "call")
		b.Execute(ctx, func(context.Context) error { return errBoom })
		b.Execute(ctx, func(context.Context) error { return nil })
		span.End()

		spans := sr.Ended()
		if len(spans) != 1 {
			t.Fatalf("%d spans ended, want only the caller's: the breaker starts none", len(spans))
		}
		ev := spans[0].Events()
		if len(ev) != 2 {
			t.Fatalf("events = %v, want a transition and a rejection", ev)
		}
		kind, name := telemetry.KeyKind.String("breaker"), telemetry.KeyName.String("llm")
		want := []struct {
			name  string
			attrs []attribute.KeyValue
		}{
			{telemetry.EventState, []attribute.KeyValue{kind, name, telemetry.KeyFrom.String("closed"), telemetry.KeyState.String("open")}},
			{telemetry.EventRejected, []attribute.KeyValue{kind, name, telemetry.KeyReason.String("open")}},
		}
		for i, w := range want {
			got, wantSet := attribute.NewSet(ev[i].Attributes...), attribute.NewSet(w.attrs...)
			if ev[i].Name != w.name || !got.Equals(&wantSet) {
				t.Fatalf("event %d = %s %v, want %s %v", i, ev[i].Name, ev[i].Attributes, w.name, w.attrs)
			}
		}
	})
}

// The span event names both states as the metrics do: half_open, not the
// half-open of State.String.
func TestSpanEventHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		defer tp.Shutdown(context.Background())
		b := newBreaker(t, Config{Name: "llm", ConsecutiveFailures: 1, OpenTimeout: time.Second})
		call(b, errBoom)
		time.Sleep(time.Second)

		ctx, span := tp.Tracer("test").Start(context.Background(), "probe")
		b.Execute(ctx, func(context.Context) error { return nil })
		span.End()

		var got []string
		for _, ev := range sr.Ended()[0].Events() {
			if ev.Name != telemetry.EventState {
				continue
			}
			set := attribute.NewSet(ev.Attributes...)
			from, _ := set.Value(telemetry.KeyFrom)
			to, _ := set.Value(telemetry.KeyState)
			got = append(got, from.AsString()+"->"+to.AsString())
		}
		if want := []string{"open->half_open", "half_open->closed"}; !slices.Equal(got, want) {
			t.Fatalf("transition events = %v, want %v", got, want)
		}
	})
}

// Counting a transition and observing the state set build no attribute set
// and allocate nothing once the SDK has seen each series.
func TestTelemetryAllocs(t *testing.T) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	defer mp.Shutdown(context.Background())
	in := telemetry.NewInstruments(mp)
	rec := newRecorder(in, "llm")
	ctx := context.Background()
	for from := Closed; from <= Open; from++ {
		for to := Closed; to <= Open; to++ {
			rec.transition(ctx, from, to)
		}
	}
	if n := testing.AllocsPerRun(100, func() { rec.transition(ctx, Open, HalfOpen) }); n != 0 {
		t.Errorf("transition: %v allocs, want 0", n)
	}
	// An out-of-range State is ignored, not an index panic.
	rec.transition(ctx, State(7), Open)
	rec.transition(ctx, Open, State(-1))
	if got := points(t, r, telemetry.MetricTransitions); len(got) != 9 {
		t.Errorf("%d transition series, want 9: %v", len(got), got)
	}
}

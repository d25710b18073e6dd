package breaker

import (
	"context"
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
		gaugeKey := attrs(policyAttrs...)
		to := func(s string) string { return attrs(append(policyAttrs, string(telemetry.KeyState), s)...) }
		reason := func(s string) string { return attrs(append(policyAttrs, string(telemetry.KeyReason), s)...) }
		check := func(step string, gauge int64, transitions, rejections map[string]int64) {
			t.Helper()
			if got := points(t, r, telemetry.MetricState); !equalMaps(got, map[string]int64{gaugeKey: gauge}) {
				t.Fatalf("%s: gauge = %v, want %d", step, got, gauge)
			}
			if got := points(t, r, telemetry.MetricTransitions); !equalMaps(got, transitions) {
				t.Fatalf("%s: transitions = %v, want %v", step, got, transitions)
			}
			if got := points(t, r, telemetry.MetricRejections); !equalMaps(got, rejections) {
				t.Fatalf("%s: rejections = %v, want %v", step, got, rejections)
			}
		}

		check("new", 0, nil, nil)
		call(b, errBoom)
		call(b, errBoom)
		call(b, nil)
		call(b, nil)
		check("tripped", 2, map[string]int64{to("open"): 1}, map[string]int64{reason("open"): 2})

		time.Sleep(10 * time.Second)
		// No call: collecting the gauge moves it on.
		check("timed out", 1, map[string]int64{to("open"): 1, to("half-open"): 1}, map[string]int64{reason("open"): 2})

		ctx, tok, err := b.Enter(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		call(b, nil)
		b.Exit(ctx, tok, nil)
		check("closed", 0, map[string]int64{to("open"): 1, to("half-open"): 1, to("closed"): 1},
			map[string]int64{reason("open"): 2, reason("half_open_full"): 1})

		b.ForceOpen()
		check("forced", 2, map[string]int64{to("open"): 2, to("half-open"): 1, to("closed"): 1},
			map[string]int64{reason("open"): 2, reason("half_open_full"): 1})
		b.Reset()
		check("reset", 0, map[string]int64{to("open"): 2, to("half-open"): 1, to("closed"): 2},
			map[string]int64{reason("open"): 2, reason("half_open_full"): 1})

		if err := b.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if got := points(t, r, telemetry.MetricState); len(got) != 0 {
			t.Fatalf("gauge after Close: %v", got)
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

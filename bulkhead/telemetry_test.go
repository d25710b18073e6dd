package bulkhead

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// collect returns the metrics of r by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/watertight/watertight" {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func policySet(name string) attribute.Set {
	return attribute.NewSet(
		attribute.String("watertight.policy.kind", "bulkhead"),
		attribute.String("watertight.policy.name", name))
}

func rejectionSet(name, reason string) attribute.Set {
	return attribute.NewSet(
		attribute.String("watertight.policy.kind", "bulkhead"),
		attribute.String("watertight.policy.name", name),
		attribute.String("watertight.rejection.reason", reason))
}

// checkGauges checks the active and queued up-down counters of bulkhead name.
func checkGauges(t *testing.T, got map[string]metricdata.Metrics, name string, active, queued int64) {
	t.Helper()
	for _, g := range []struct {
		metric, desc string
		value        int64
	}{
		{"watertight.bulkhead.active", "Calls holding a bulkhead slot.", active},
		{"watertight.bulkhead.queued", "Calls waiting for a bulkhead slot.", queued},
	} {
		want := metricdata.Metrics{
			Name: g.metric, Description: g.desc, Unit: "{call}",
			Data: metricdata.Sum[int64]{
				Temporality: metricdata.CumulativeTemporality,
				IsMonotonic: false,
				DataPoints:  []metricdata.DataPoint[int64]{{Attributes: policySet(name), Value: g.value}},
			},
		}
		metricdatatest.AssertEqual(t, want, got[g.metric], metricdatatest.IgnoreTimestamp())
	}
}

func TestTelemetryMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
		defer mp.Shutdown(context.Background())
		b := mustNew(t, Config{Name: "llm", Limit: 1, MaxQueue: 1, MaxWait: time.Second, MeterProvider: mp})

		got := collect(t, r)
		checkGauges(t, got, "llm", 0, 0)
		if _, ok := got["watertight.rejections"]; ok {
			t.Error("rejections reported before any rejection")
		}

		k := newBlocker(b)
		k.start(context.Background(), "holder")
		k.start(context.Background(), "waiter") // will hit MaxWait
		checkGauges(t, collect(t, r), "llm", 1, 1)

		for range 2 {
			b.Execute(context.Background(), func(context.Context) error { return nil }) // full
		}
		time.Sleep(time.Second)
		synctest.Wait() // the waiter timed out
		canceled, cancel := context.WithCancel(context.Background())
		cancel()
		b.Execute(canceled, func(context.Context) error { return nil }) // not counted

		got = collect(t, r)
		checkGauges(t, got, "llm", 1, 0)
		want := metricdata.Metrics{
			Name: "watertight.rejections", Description: "Calls refused before they ran, by policy and reason.", Unit: "{call}",
			Data: metricdata.Sum[int64]{
				Temporality: metricdata.CumulativeTemporality,
				IsMonotonic: true,
				DataPoints: []metricdata.DataPoint[int64]{
					{Attributes: rejectionSet("llm", "full"), Value: 2},
					{Attributes: rejectionSet("llm", "wait_timeout"), Value: 1},
				},
			},
		}
		metricdatatest.AssertEqual(t, want, got["watertight.rejections"], metricdatatest.IgnoreTimestamp())

		k.release("holder")
		b.Close()
		got = collect(t, r)
		for _, name := range []string{"watertight.bulkhead.active", "watertight.bulkhead.queued"} {
			if m, ok := got[name]; ok && len(m.Data.(metricdata.Sum[int64]).DataPoints) > 0 {
				t.Errorf("%s observed after Close: %+v", name, m.Data)
			}
		}
		metricdatatest.AssertEqual(t, want, got["watertight.rejections"], metricdatatest.IgnoreTimestamp())
	})
}

func TestTelemetryTwoBulkheadsOneProvider(t *testing.T) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	defer mp.Shutdown(context.Background())
	a := mustNew(t, Config{Name: "a", Limit: 2, MeterProvider: mp})
	b := mustNew(t, Config{Name: "b", Limit: 2, MeterProvider: mp})
	a.Enter(context.Background())
	b.Enter(context.Background())
	b.Enter(context.Background())
	got := collect(t, r)
	m := got["watertight.bulkhead.active"].Data.(metricdata.Sum[int64])
	want := map[attribute.Set]int64{policySet("a"): 1, policySet("b"): 2}
	if len(m.DataPoints) != 2 {
		t.Fatalf("active data points %+v", m.DataPoints)
	}
	for _, dp := range m.DataPoints {
		if want[dp.Attributes] != dp.Value {
			t.Errorf("active %v = %d; want %d", dp.Attributes, dp.Value, want[dp.Attributes])
		}
	}
	a.Close()
	got = collect(t, r)
	m = got["watertight.bulkhead.active"].Data.(metricdata.Sum[int64])
	if len(m.DataPoints) != 1 || m.DataPoints[0].Attributes != policySet("b") || m.DataPoints[0].Value != 2 {
		t.Errorf("after closing a: %+v; want only b = 2", m.DataPoints)
	}
	a.Exit(context.Background(), Permit{}, nil)
	b.Exit(context.Background(), Permit{}, nil)
	b.Exit(context.Background(), Permit{}, nil)
}

func TestTelemetrySpanEvent(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	b := mustNew(t, Config{Name: "llm", Limit: 1})

	ctx, span := tp.Tracer("test").Start(context.Background(), "call")
	if err := b.Execute(ctx, func(context.Context) error { return nil }); err != nil { // no event
		t.Fatal(err)
	}
	b.Enter(ctx)
	b.Execute(ctx, func(context.Context) error { return nil }) // rejected
	b.Exit(ctx, Permit{}, nil)
	span.End()

	spans := sr.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans; the bulkhead must start none", len(spans))
	}
	events := spans[0].Events()
	if len(events) != 1 || events[0].Name != "watertight.rejected" {
		t.Fatalf("events %+v; want one watertight.rejected", events)
	}
	if got, want := attribute.NewSet(events[0].Attributes...), rejectionSet("llm", "full"); !got.Equals(&want) {
		t.Errorf("event attributes %v; want %v", got.Encoded(attribute.DefaultEncoder()), want.Encoded(attribute.DefaultEncoder()))
	}
}

package adaptive_test

import (
	"context"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/watertight/watertight/adaptive"
)

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func policySet(name string) attribute.Set {
	return attribute.NewSet(
		attribute.String("watertight.policy.kind", "adaptive"),
		attribute.String("watertight.policy.name", name))
}

func checkObserved(t *testing.T, got map[string]metricdata.Metrics, name string, active, queued, limit int64) {
	t.Helper()
	for _, g := range []struct {
		metric, desc string
		value        int64
	}{
		{"watertight.bulkhead.active", "Calls holding a bulkhead slot.", active},
		{"watertight.bulkhead.queued", "Calls waiting for a bulkhead slot.", queued},
	} {
		metricdatatest.AssertEqual(t, metricdata.Metrics{
			Name: g.metric, Description: g.desc, Unit: "{call}",
			Data: metricdata.Sum[int64]{
				Temporality: metricdata.CumulativeTemporality,
				DataPoints:  []metricdata.DataPoint[int64]{{Attributes: policySet(name), Value: g.value}},
			},
		}, got[g.metric], metricdatatest.IgnoreTimestamp())
	}
	metricdatatest.AssertEqual(t, metricdata.Metrics{
		Name: "watertight.adaptive.limit", Description: "The limit an adaptive concurrency limit has learned; a probe caps admission lower for a while.", Unit: "{call}",
		Data: metricdata.Gauge[int64]{
			DataPoints: []metricdata.DataPoint[int64]{{Attributes: policySet(name), Value: limit}},
		},
	}, got["watertight.adaptive.limit"], metricdatatest.IgnoreTimestamp())
}

func TestTelemetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
		defer mp.Shutdown(context.Background())
		l := mustNew(t, adaptive.Config{Name: "llm", InitialLimit: 1, MaxQueue: 1, MaxWait: 1e9, MeterProvider: mp})
		checkObserved(t, collect(t, r), "llm", 0, 0, 1)

		k := newBlocker(l)
		k.start(context.Background(), "h")
		k.start(context.Background(), "q")
		l.Execute(context.Background(), func(context.Context) error { return nil }) // full
		got := collect(t, r)
		checkObserved(t, got, "llm", 1, 1, 1)
		k.release("h")
		k.release("q")
		k.start(context.Background(), "h2")
		l.Execute(context.Background(), func(context.Context) error { return nil }) // waits 1 s: wait_timeout
		k.release("h2")
		got = collect(t, r)
		checkObserved(t, got, "llm", 0, 0, 1)
		rej := func(reason string) attribute.Set {
			return attribute.NewSet(
				attribute.String("watertight.policy.kind", "adaptive"),
				attribute.String("watertight.policy.name", "llm"),
				attribute.String("watertight.rejection.reason", reason))
		}
		metricdatatest.AssertEqual(t, metricdata.Metrics{
			Name: "watertight.rejections", Description: "Calls refused before they ran, by policy and reason.", Unit: "{call}",
			Data: metricdata.Sum[int64]{
				Temporality: metricdata.CumulativeTemporality, IsMonotonic: true,
				DataPoints: []metricdata.DataPoint[int64]{
					{Attributes: rej("full"), Value: 1},
					{Attributes: rej("wait_timeout"), Value: 1},
				},
			},
		}, got["watertight.rejections"], metricdatatest.IgnoreTimestamp())

		l.Close()
		got = collect(t, r)
		for _, m := range []string{"watertight.bulkhead.active", "watertight.adaptive.limit"} {
			if _, ok := got[m]; ok {
				t.Errorf("%s still reported after Close", m)
			}
		}
	})
}

package ratelimit_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/watertight/watertight/ratelimit"
)

// holdGauge collects r and returns the watertight.ratelimit.hold metric,
// and whether it was reported.
func holdGauge(t *testing.T, r *sdkmetric.ManualReader) (metricdata.Metrics, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "watertight.ratelimit.hold" {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// TestHoldGauge: watertight.ratelimit.hold reports the seconds the hold has
// left at each collection, 0 without a hold, and nothing after Close.
func TestHoldGauge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
		defer mp.Shutdown(context.Background())
		l := newLimiter(t, ratelimit.Config{Name: "llm", MeterProvider: mp})
		attrs := attribute.NewSet(
			attribute.String("watertight.policy.kind", "ratelimit"),
			attribute.String("watertight.policy.name", "llm"))
		check := func(want float64) {
			t.Helper()
			got, ok := holdGauge(t, r)
			if !ok {
				t.Fatal("watertight.ratelimit.hold not reported")
			}
			metricdatatest.AssertEqual(t, metricdata.Metrics{
				Name:        "watertight.ratelimit.hold",
				Description: "Time left on a rate limit's hold, 0 when none is in force.",
				Unit:        "s",
				Data: metricdata.Gauge[float64]{
					DataPoints: []metricdata.DataPoint[float64]{{Attributes: attrs, Value: want}},
				},
			}, got, metricdatatest.IgnoreTimestamp())
		}
		check(0)
		l.HoldFor(30 * time.Second)
		check(30)
		time.Sleep(10 * time.Second)
		check(20)
		time.Sleep(time.Minute)
		check(0)

		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l.Close() // idempotent
		if _, ok := holdGauge(t, r); ok {
			t.Error("watertight.ratelimit.hold still reported after Close")
		}
	})
}

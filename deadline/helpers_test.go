package deadline

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight/watertight/internal/telemetry"
)

// mustNew returns New(cfg), failing t on error. A nil MeterProvider is
// replaced by a no-op one so that tests never touch the global provider.
func mustNew(t testing.TB, cfg Config) *Deadline {
	t.Helper()
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = noop.NewMeterProvider()
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return d
}

// newMeter returns a MeterProvider read by the returned reader, shut down
// when t ends.
func newMeter(t testing.TB) (metric.MeterProvider, *sdkmetric.ManualReader) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() {
		if err := mp.Shutdown(context.Background()); err != nil {
			t.Errorf("MeterProvider.Shutdown: %v", err)
		}
	})
	return mp, r
}

// collect returns the int64 sums of the counter named name, by
// watertight.policy.name, checking that every data point carries exactly
// the attributes of a deadline policy.
func collect(t testing.TB, r *sdkmetric.ManualReader, name string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != telemetry.ScopeName {
			t.Errorf("scope = %q, want %q", sm.Scope.Name, telemetry.ScopeName)
		}
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("%s: data %T, want metricdata.Sum[int64]", name, m.Data)
			}
			if !sum.IsMonotonic || m.Unit != "{call}" {
				t.Errorf("%s: monotonic %v unit %q, want a counter of {call}", name, sum.IsMonotonic, m.Unit)
			}
			for _, dp := range sum.DataPoints {
				kind, _ := dp.Attributes.Value(telemetry.KeyKind)
				pname, _ := dp.Attributes.Value(telemetry.KeyName)
				if dp.Attributes.Len() != 2 || kind != attribute.StringValue("deadline") {
					t.Errorf("%s: attributes %v, want exactly kind=deadline and a name", name, dp.Attributes.ToSlice())
				}
				got[pname.AsString()] += dp.Value
			}
		}
	}
	return got
}

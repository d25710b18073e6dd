package hedge

import (
	"context"
	"errors"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/watertight/watertight/retry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

var errBoom = errors.New("boom")

func always(err error) func(int) error { return func(int) error { return err } }

// hedgeOutcomes are the outcomes of a hedge.
var hedgeOutcomes = [...]string{won, lost, canceled, failed}

func mustBudget(t testing.TB, cfg retry.BudgetConfig) *retry.Budget {
	t.Helper()
	b, err := retry.NewBudget(cfg)
	if err != nil {
		t.Fatalf("NewBudget(%+v): %v", cfg, err)
	}
	return b
}

// sums reads every int64 counter of r as name -> attribute set -> value.
func sums(t *testing.T, r *sdkmetric.ManualReader) map[string]map[attribute.Set]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[attribute.Set]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			out[m.Name] = map[attribute.Set]int64{}
			for _, dp := range sum.DataPoints {
				out[m.Name][dp.Attributes] = dp.Value
			}
		}
	}
	return out
}

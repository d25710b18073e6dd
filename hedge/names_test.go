package hedge

import "testing"

// The telemetry names hedge exports, spelled as dashboards know them.
func TestTelemetryNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Kind, "hedge"},
		{Metric, "watertight.hedges"},
		{string(KeyOutcome), "watertight.hedge.outcome"},
		{Event, "watertight.hedge"},
		{string(KeyAfterFailure), "watertight.hedge.after_failure"},
		{Won, "won"},
		{Lost, "lost"},
		{Canceled, "canceled"},
		{Failed, "failed"},
	} {
		if tc.got != tc.want {
			t.Errorf("name %q, want %q", tc.got, tc.want)
		}
	}
}

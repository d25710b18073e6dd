package hedge

import "testing"

// The telemetry names the package documentation lists, spelled as dashboards know them.
func TestTelemetryNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{kind, "hedge"},
		{metricHedges, "watertight.hedges"},
		{string(keyOutcome), "watertight.hedge.outcome"},
		{eventHedge, "watertight.hedge"},
		{string(keyAfterFailure), "watertight.hedge.after_failure"},
		{won, "won"},
		{lost, "lost"},
		{canceled, "canceled"},
		{failed, "failed"},
	} {
		if tc.got != tc.want {
			t.Errorf("name %q, want %q", tc.got, tc.want)
		}
	}
}

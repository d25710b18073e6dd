package retry

import (
	"testing"

	"github.com/watertight/watertight/internal/telemetry"
)

// The telemetry names retry exports are the ones internal/telemetry
// defines, spelled as dashboards know them; the exhaustion's reason is not
// the rejection's.
func TestTelemetryNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{string(KeyReason), "watertight.retry.reason"},
		{Kind, "retry"},
	} {
		if tc.got != tc.want {
			t.Errorf("name %q, want %q", tc.got, tc.want)
		}
	}
	if KeyReason == telemetry.KeyReason {
		t.Errorf("retry.KeyReason is the rejection's reason, %q", KeyReason)
	}
}

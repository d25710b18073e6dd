package retry

import (
	"testing"

	"github.com/watertight/watertight/internal/telemetry"
)

// The reason attribute the package documentation names is the one
// internal/telemetry defines, and it is not the rejection's.
func TestTelemetryNames(t *testing.T) {
	if got := string(telemetry.KeyRetryReason); got != "watertight.retry.reason" {
		t.Errorf("reason key %q, want watertight.retry.reason", got)
	}
	if telemetry.KeyRetryReason == telemetry.KeyReason {
		t.Errorf("the retry's reason is the rejection's, %q", telemetry.KeyReason)
	}
}

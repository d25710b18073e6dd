package telemetry

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/nilcheck"
)

// MeterOf returns the watertight meter of mp, or of the global
// MeterProvider if mp is nil or holds a nil pointer.
func MeterOf(mp metric.MeterProvider) metric.Meter {
	if mp == nil || nilcheck.Pointer(mp) {
		mp = otel.GetMeterProvider()
	}
	return mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
}

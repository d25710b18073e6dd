package telemetry

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// MeterOf returns the watertight meter of mp (ScopeName, at Version), or
// of the global MeterProvider if mp is nil or holds a nil pointer: the
// meter NewInstruments takes its instruments from, for a package that
// keeps an instrument of its own beside them (fallback's
// watertight.fallbacks). A meter of the global provider taken before an
// SDK is installed is connected to it when it is. It is safe for
// concurrent use.
func MeterOf(mp metric.MeterProvider) metric.Meter {
	if mp == nil || isNilPointer(mp) {
		mp = otel.GetMeterProvider()
	}
	return mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
}

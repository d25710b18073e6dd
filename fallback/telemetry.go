package fallback

import (
	"reflect"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/nilcheck"
	"github.com/watertight/watertight/internal/telemetry"
)

// The fallback telemetry's names.
const (
	metricFallbacks = "watertight.fallbacks"
	eventFallback   = "watertight.fallback"
)

var (
	keyFrom   = attribute.Key("watertight.fallback.from")
	keyTo     = attribute.Key("watertight.fallback.to")
	keyReason = attribute.Key("watertight.fallback.reason")
)

// counters caches the watertight.fallbacks counter of each MeterProvider
// (the key nil standing for the global one), since Do takes its Config per
// call: a fallback then costs no instrument lookup. The counter comes from
// telemetry.MeterOf, the meter of every other watertight instrument.
var counters sync.Map // metric.MeterProvider (or nil) -> metric.Int64Counter

// counter returns the watertight.fallbacks counter of mp, nil (or a nil
// pointer) meaning the global MeterProvider.
func counter(mp metric.MeterProvider) metric.Int64Counter {
	var key any
	if mp != nil && !nilcheck.Pointer(mp) {
		if !reflect.TypeOf(mp).Comparable() {
			return newCounter(mp) // cannot be a map key: not cached
		}
		key = mp
	}
	if c, ok := counters.Load(key); ok {
		return c.(metric.Int64Counter)
	}
	c, _ := counters.LoadOrStore(key, newCounter(mp))
	return c.(metric.Int64Counter)
}

func newCounter(mp metric.MeterProvider) metric.Int64Counter {
	c, err := telemetry.MeterOf(mp).Int64Counter(metricFallbacks, metric.WithUnit("{call}"),
		metric.WithDescription("Calls moved from one alternative to the next, by the failure that moved them."))
	if err != nil {
		otel.Handle(err)
	}
	return c
}

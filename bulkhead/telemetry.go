package bulkhead

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/telemetry"
)

// registerObservers registers the watertight.bulkhead.active and
// watertight.bulkhead.queued up-down counters, observed from b's exact
// counts at each collection.
func (b *Bulkhead) registerObservers(m metric.Meter, name string) {
	active, queued := telemetry.SlotCounters(m)
	opt := metric.WithAttributeSet(attribute.NewSet(telemetry.PolicyAttrs(Kind, name)...))
	b.obs.Register(m, func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(active, int64(b.slots.Active()), opt)
		o.ObserveInt64(queued, int64(b.slots.Queued()), opt)
		return nil
	}, active, queued)
}

// Close unregisters the bulkhead's active and queued counters, so that a
// bulkhead out of use stops being reported and can be garbage collected.
// The bulkhead keeps working, and still counts rejections. Close is
// idempotent, safe for concurrent use, and returns nil.
func (b *Bulkhead) Close() error { return b.obs.Close() }

package bulkhead

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/telemetry"
)

// registerObservers registers the watertight.bulkhead.active and
// watertight.bulkhead.queued up-down counters, observed from b's exact
// counts at each collection. It returns nil if registration failed; the
// failure goes to otel.Handle, as telemetry never fails a constructor.
func (b *Bulkhead) registerObservers(m metric.Meter, name string) metric.Registration {
	active, queued := telemetry.SlotCounters(m)
	if active == nil || queued == nil {
		return nil
	}
	opt := metric.WithAttributeSet(attribute.NewSet(telemetry.PolicyAttrs(Kind, name)...))
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(active, int64(b.slots.Active()), opt)
		o.ObserveInt64(queued, int64(b.slots.Queued()), opt)
		return nil
	}, active, queued)
	if err != nil {
		otel.Handle(err)
		return nil
	}
	return reg
}

// Close unregisters the bulkhead's observable instruments (active and
// queued), so that a bulkhead out of use stops being reported and can be
// garbage collected. It is idempotent and always returns nil. The bulkhead
// keeps working after Close, and still counts rejections. Close is safe
// for concurrent use.
func (b *Bulkhead) Close() error {
	b.closeOnce.Do(func() {
		if b.reg != nil {
			if err := b.reg.Unregister(); err != nil {
				otel.Handle(err)
			}
		}
	})
	return nil
}

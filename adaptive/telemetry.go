package adaptive

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/telemetry"
)

// registerObservers registers the watertight.bulkhead.active and
// watertight.bulkhead.queued up-down counters and the
// watertight.adaptive.limit gauge, observed from l's exact counts and
// limit at each collection. It returns nil if registration failed; the
// failure goes to otel.Handle, as telemetry never fails a constructor.
func (l *Limiter) registerObservers(m metric.Meter, name string) metric.Registration {
	active, queued := telemetry.SlotCounters(m)
	limit := telemetry.LimitGauge(m)
	if active == nil || queued == nil || limit == nil {
		return nil
	}
	opt := metric.WithAttributeSet(attribute.NewSet(telemetry.PolicyAttrs(Kind, name)...))
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(active, int64(l.slots.Active()), opt)
		o.ObserveInt64(queued, int64(l.slots.Queued()), opt)
		o.ObserveInt64(limit, l.learned.Load(), opt)
		return nil
	}, active, queued, limit)
	if err != nil {
		otel.Handle(err)
		return nil
	}
	return reg
}

// Close unregisters the limiter's observable instruments (active, queued
// and limit), so that a limiter no longer in use stops being reported and
// can be garbage collected. It is idempotent and always returns nil; the
// limiter keeps working after Close, and still counts rejections. Close is
// safe for concurrent use.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		if l.reg != nil {
			if err := l.reg.Unregister(); err != nil {
				otel.Handle(err)
			}
		}
	})
	return nil
}

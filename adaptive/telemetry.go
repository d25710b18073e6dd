package adaptive

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/telemetry"
)

// registerObservers registers the active, queued and limit instruments, or
// returns nil after passing the error to otel.Handle.
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

// Close unregisters the limiter's active, queued and limit instruments.
// The limiter keeps working, and still counts rejections. Close is
// idempotent, safe for concurrent use, and returns nil.
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

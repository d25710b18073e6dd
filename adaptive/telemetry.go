package adaptive

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/telemetry"
)

func (l *Limiter) registerObservers(m metric.Meter, name string) {
	active, queued := telemetry.SlotCounters(m)
	limit := telemetry.LimitGauge(m)
	opt := metric.WithAttributeSet(attribute.NewSet(telemetry.PolicyAttrs(Kind, name)...))
	l.obs.Register(m, func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(active, int64(l.slots.Active()), opt)
		o.ObserveInt64(queued, int64(l.slots.Queued()), opt)
		o.ObserveInt64(limit, l.learned.Load(), opt)
		return nil
	}, active, queued, limit)
}

// Close unregisters the limiter's active, queued and limit instruments.
// The limiter keeps working, and still counts rejections. Close is
// idempotent, safe for concurrent use, and returns nil.
func (l *Limiter) Close() error { return l.obs.Close() }

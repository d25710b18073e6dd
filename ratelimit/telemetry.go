package ratelimit

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/telemetry"
)

// registerObservers registers the watertight.ratelimit.hold gauge, read
// from the hold at each collection, so that an attempt pays nothing for it.
func (l *Limiter) registerObservers(m metric.Meter, name string) {
	hold := telemetry.HoldGauge(m)
	opt := metric.WithAttributeSet(attribute.NewSet(telemetry.PolicyAttrs(Kind, name)...))
	l.obs.Register(m, func(_ context.Context, o metric.Observer) error {
		o.ObserveFloat64(hold, l.Held().Seconds(), opt)
		return nil
	}, hold)
}

// Close unregisters the limiter's hold gauge, so that a Limiter out of use
// stops being reported and can be garbage collected. The Limiter keeps
// working, and still counts rejections. Close is idempotent, safe for
// concurrent use, and returns nil.
func (l *Limiter) Close() error { return l.obs.Close() }

package compose

import (
	"github.com/watertight/watertight/internal/pipeopt"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Option configures a [Pipeline] in [New].
type Option func(*options)

// options is an alias, so that the root package watertight can read what
// the options of a call to its New set (see internal/pipeopt).
type options = pipeopt.Options

// WithTracerProvider sets the provider of the pipeline's spans. Without it
// (or with nil), the global provider is used, as it stands at each call.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.TracerProvider = tp }
}

// WithMeterProvider sets the provider of the pipeline's
// watertight.call.duration histogram. Without it (or with nil), the global
// provider is used. Each policy takes its own MeterProvider in its Config.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.MeterProvider = mp }
}

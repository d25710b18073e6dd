// Package pipeopt holds the settings behind compose.Option, so that the
// root package watertight can read the options it is given and hand the
// same providers to the policies it builds, while compose's own API shows
// only opaque options.
package pipeopt

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Options are what compose.Option functions set. The zero value means the
// global providers.
type Options struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// Apply returns the Options that opts set, in order; nil entries are
// skipped.
func Apply[O ~func(*Options)](opts []O) Options {
	var o Options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

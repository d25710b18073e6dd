package telemetry

import (
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/watertight/watertight/internal/nilcheck"
)

// defaultTracerProvider is the global TracerProvider before any SDK is
// installed, found by its type: another package's init may have set one.
var defaultTracerProvider = func() trace.TracerProvider {
	tp := otel.GetTracerProvider()
	if reflect.TypeOf(tp).String() == "*global.tracerProvider" {
		return tp
	}
	return nil
}()

var tracerOpts = []trace.TracerOption{trace.WithInstrumentationVersion(Version)}

// Tracer starts the spans of one pipeline. Its zero value starts none.
type Tracer struct {
	tracer trace.Tracer
	global bool // no provider given: ask per call whether an SDK is installed
}

// NewTracer returns the Tracer of tp, or of the global provider if tp is nil.
func NewTracer(tp trace.TracerProvider) Tracer {
	if tp == nil || nilcheck.Pointer(tp) {
		return Tracer{tracer: otel.GetTracerProvider().Tracer(ScopeName, tracerOpts...), global: true}
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		return Tracer{}
	}
	return Tracer{tracer: tp.Tracer(ScopeName, tracerOpts...)}
}

// Tracer returns the tracer, or nil if spans are off: the provider given
// was the no-op one, or none was given and no SDK is installed globally.
// A no-op span costs allocations and records nothing.
func (t Tracer) Tracer() trace.Tracer {
	if t.global {
		tp := otel.GetTracerProvider()
		if _, ok := tp.(noop.TracerProvider); ok || tp == defaultTracerProvider {
			return nil
		}
	}
	return t.tracer
}

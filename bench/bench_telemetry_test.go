package bench

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkTelemetry is the four composed (watertight) with telemetry off,
// the global providers left as they are by default (no-op), and on, with
// SDK providers given to the pipeline and to every policy (see
// sdkProviders). "hand" is the floor for "on": the pipeline with telemetry
// off, and around it, done by hand with the same SDK providers, exactly the
// records "on" makes on success (a call span, an attempt span, a timed
// histogram Record). It charges the SDK's cost in place, with the
// pipeline's own allocations and code beside it, so that on - hand is what
// watertight's telemetry adds beyond the SDK; on - off - (the SDK alone,
// BenchmarkFloor/op=sdk-2spans+histogram) assumes the costs add up, which on
// a shared VM they did not (garbage collection and caches are shared).
// Compare with `benchstat -col /otel`. failsafe-go has no OpenTelemetry
// support to compare with.
func BenchmarkTelemetry(b *testing.B) {
	b.Run("otel=off", func(b *testing.B) {
		p := wtComposed(b, providers{})
		seq(b, nil, func() error { return p.Execute(bg, work) })
	})
	b.Run("otel=on", func(b *testing.B) {
		mp, tp := sdkProviders(b)
		p := wtComposed(b, providers{mp: mp, tp: tp})
		seq(b, nil, func() error { return p.Execute(bg, work) })
	})
	b.Run("otel=hand", func(b *testing.B) {
		mp, tp := sdkProviders(b)
		p := wtComposed(b, providers{})
		tr := tp.Tracer("x")
		hist, _ := mp.Meter("x").Float64Histogram("h")
		kv := attribute.String("watertight.pipeline.name", "p")
		callOpts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(kv)}
		attemptOpts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attribute.Int("watertight.retry.attempt", 1))}
		recOpts := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kv))}
		seq(b, nil, func() error {
			start := time.Now()
			ctx, call := tr.Start(bg, "s", callOpts...)
			actx, attempt := tr.Start(ctx, "a", attemptOpts...)
			err := p.Execute(actx, work)
			attempt.End()
			hist.Record(ctx, time.Since(start).Seconds(), recOpts...)
			call.End()
			return err
		})
	})
}

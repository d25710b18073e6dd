package bench

import "testing"

// BenchmarkTelemetry is the four composed (watertight) with telemetry off,
// the global providers left as they are by default (no-op), and on, with
// SDK providers given to the pipeline and to every policy (see
// sdkProviders). Compare with `benchstat -col /otel`; the floor for "on" is
// BenchmarkFloor/op=sdk-span+metrics. failsafe-go has no OpenTelemetry
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
}

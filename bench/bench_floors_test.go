package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Floors: what the same work costs done by hand with the libraries
// watertight builds on. The targets are stated as watertight's cost above
// these. Names: BenchmarkFloor/op=<what>.

// nowSink keeps the clock readings alive.
var nowSink time.Duration

func BenchmarkFloor(b *testing.B) {
	// context.WithTimeout + cancel: what a deadline must at least do.
	b.Run("op=WithTimeout", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(bg, callTimeout)
			sink = work(ctx)
			cancel()
		}
	})
	// A bare counting semaphore: the caller's ctx checked, a slot taken by
	// compare-and-swap and freed by an atomic add in a deferred call. Any
	// bulkhead that counts its slots pays this.
	b.Run("op=atomic-semaphore", func(b *testing.B) {
		b.ReportAllocs()
		s := &floorSemaphore{limit: bigLimit}
		for b.Loop() {
			sink = s.execute(bg, work)
		}
	})
	// gobreaker's own two-step TwoStepCircuitBreaker (Allow, then the done
	// func it returns), which a watertight breaker drives for every call:
	// default settings but the same consecutive-failure threshold as the
	// breakers compared. done is a closure: one allocation per call.
	b.Run("op=gobreaker-2step", func(b *testing.B) {
		b.ReportAllocs()
		cb := gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{
			Name:        "c",
			MaxRequests: 1,
			Timeout:     breakerOpen,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= breakerFailures },
		})
		for b.Loop() {
			done, err := cb.Allow()
			if err != nil {
				b.Fatal(err)
			}
			sink = work(bg)
			done(sink)
		}
	})
	// Two clock reads and their difference: what timing fn costs the
	// adaptive limiter.
	b.Run("op=2xNow", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			start := time.Now()
			nowSink = time.Since(start)
		}
	})
	// One span on the default global (no-op, delegating) tracer.
	b.Run("op=noop-span", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, span := otel.Tracer("x").Start(bg, "s")
			sink = work(ctx)
			span.End()
		}
	})
	// The SDK's own cost for what a composed call records with telemetry
	// on, done by hand: one span with as many attributes as the pipeline
	// puts on its spans (2: the pipeline name, the attempt number), a
	// counter Add and a histogram Record with precomputed attribute sets.
	b.Run("op=sdk-span+metrics", func(b *testing.B) {
		b.ReportAllocs()
		mp, tp := sdkProviders(b)
		tr := tp.Tracer("x")
		m := mp.Meter("x")
		counter, _ := m.Int64Counter("c")
		hist, _ := m.Float64Histogram("h")
		kv := []attribute.KeyValue{attribute.String("watertight.pipeline.name", "p"), attribute.Int("watertight.attempt", 1)}
		startOpts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(kv...)}
		set := attribute.NewSet(kv[0])
		addOpts := []metric.AddOption{metric.WithAttributeSet(set)}
		recOpts := []metric.RecordOption{metric.WithAttributeSet(set)}
		for b.Loop() {
			ctx, span := tr.Start(bg, "s", startOpts...)
			sink = work(ctx)
			counter.Add(ctx, 1, addOpts...)
			hist.Record(ctx, 0.001, recOpts...)
			span.End()
		}
	})
	// What the pipeline actually records on success with telemetry on, by
	// hand: a call span and a child attempt span with one attribute each,
	// and one histogram Record.
	b.Run("op=sdk-2spans+histogram", func(b *testing.B) {
		b.ReportAllocs()
		mp, tp := sdkProviders(b)
		tr := tp.Tracer("x")
		hist, _ := mp.Meter("x").Float64Histogram("h")
		kv := attribute.String("watertight.pipeline.name", "p")
		callOpts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(kv)}
		attemptOpts := []trace.SpanStartOption{trace.WithAttributes(attribute.Int("watertight.attempt", 1))}
		recOpts := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kv))}
		for b.Loop() {
			// The duration the histogram records needs two clock reads:
			// they are part of what recording costs.
			start := time.Now()
			ctx, call := tr.Start(bg, "s", callOpts...)
			actx, attempt := tr.Start(ctx, "a", attemptOpts...)
			sink = work(actx)
			attempt.End()
			hist.Record(ctx, time.Since(start).Seconds(), recOpts...)
			call.End()
		}
	})
}

// floorSemaphore is the bare counting semaphore of
// BenchmarkFloor/op=atomic-semaphore.
type floorSemaphore struct {
	n     atomic.Int64
	limit int64
}

//go:noinline
func (s *floorSemaphore) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for {
		a := s.n.Load()
		if a >= s.limit {
			return errFloorFull
		}
		if s.n.CompareAndSwap(a, a+1) {
			return nil
		}
	}
}

//go:noinline
func (s *floorSemaphore) release() { s.n.Add(-1) }

func (s *floorSemaphore) execute(ctx context.Context, fn func(context.Context) error) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	return fn(ctx)
}

var errFloorFull = errors.New("floor: full")

package adaptive_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/internal/stage"
)

// The benchmarks use the no-op MeterProvider, and put the static bulkhead
// beside the limiter: the difference is the cost of learning (two clock
// reads and a sample).

func noopFn(context.Context) error { return nil }

type benchKey int

func benchNew(b *testing.B, cfg adaptive.Config) *adaptive.Limiter {
	b.Helper()
	cfg.MeterProvider = noop.NewMeterProvider()
	l, err := adaptive.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	for range 100 { // past the first probe
		l.Execute(context.Background(), noopFn)
	}
	return l
}

func benchBulkhead(b *testing.B, limit int) *bulkhead.Bulkhead {
	bh, err := bulkhead.New(bulkhead.Config{Limit: limit, MeterProvider: noop.NewMeterProvider()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bh.Close() })
	return bh
}

func BenchmarkExecute(b *testing.B) {
	ctx := context.Background()
	b.Run("adaptive", func(b *testing.B) {
		l := benchNew(b, adaptive.Config{})
		b.ReportAllocs()
		for b.Loop() {
			l.Execute(ctx, noopFn)
		}
	})
	b.Run("bulkhead", func(b *testing.B) {
		bh := benchBulkhead(b, 20)
		b.ReportAllocs()
		for b.Loop() {
			bh.Execute(ctx, noopFn)
		}
	})
	// The two steps compose runs, with the attempt timed by the caller
	// as compose does.
	b.Run("adaptive/acquire+sample", func(b *testing.B) {
		l := benchNew(b, adaptive.Config{})
		b.ReportAllocs()
		for b.Loop() {
			p, err := l.Acquire(ctx)
			if err == nil {
				actx, s := p.Begin(ctx)
				s.End(noopFn(actx))
				p.Release()
			}
		}
	})
	// A caller's context of a few values (a server's request): each
	// attempt's record looks for an enclosing one in it.
	deep := ctx
	for i := range 4 {
		deep = context.WithValue(deep, benchKey(i), i)
	}
	b.Run("adaptive/ctx4", func(b *testing.B) {
		l := benchNew(b, adaptive.Config{})
		b.ReportAllocs()
		for b.Loop() {
			l.Execute(deep, noopFn)
		}
	})
	b.Run("bulkhead/ctx4", func(b *testing.B) {
		bh := benchBulkhead(b, 20)
		b.ReportAllocs()
		for b.Loop() {
			bh.Execute(deep, noopFn)
		}
	})
	// A call answered, as httppolicy's Transport marks it: the limiter
	// counts the answer.
	b.Run("adaptive/answer-clock", func(b *testing.B) {
		l := benchNew(b, adaptive.Config{})
		cctx := deep
		answered := func(ctx context.Context) error { stage.Answered(ctx); return nil }
		b.ReportAllocs()
		for b.Loop() {
			l.Execute(cctx, answered)
		}
	})
	// The cost of the clock alone, for scale.
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			time.Now()
		}
	})
}

func BenchmarkExecuteParallel(b *testing.B) {
	ctx := context.Background()
	limit := 4 * runtime.GOMAXPROCS(0) // RunParallel's goroutines never fill it
	b.Run("adaptive", func(b *testing.B) {
		l := benchNew(b, adaptive.Config{MinLimit: limit, MaxLimit: limit})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Execute(ctx, noopFn)
			}
		})
	})
	// Calls answered, as the Transport marks them: two adds per call to the
	// limiter's count of answered calls, shared by every goroutine.
	b.Run("adaptive/answer-clock", func(b *testing.B) {
		l := benchNew(b, adaptive.Config{MinLimit: limit, MaxLimit: limit})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			cctx := ctx
			answered := func(ctx context.Context) error { stage.Answered(ctx); return nil }
			for pb.Next() {
				l.Execute(cctx, answered)
			}
		})
	})
	b.Run("bulkhead", func(b *testing.B) {
		bh := benchBulkhead(b, limit)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bh.Execute(ctx, noopFn)
			}
		})
	})
}

func BenchmarkRejectFull(b *testing.B) {
	ctx := context.Background()
	l := benchNew(b, adaptive.Config{MinLimit: 1, MaxLimit: 1})
	p, _ := l.Acquire(ctx)
	defer p.Release()
	b.ReportAllocs()
	for b.Loop() {
		if l.Execute(ctx, noopFn) == nil {
			b.Fatal("not rejected")
		}
	}
}

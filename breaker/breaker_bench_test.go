package breaker

import (
	"context"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
)

// BenchmarkGobreakerTwoStep is the reference: gobreaker's own two-step
// Allow and done, which Execute drives, on the success path.
func BenchmarkGobreakerTwoStep(b *testing.B) {
	cb := gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{Name: "bench"})
	b.ReportAllocs()
	for b.Loop() {
		done, err := cb.Allow()
		if err != nil {
			b.Fatal(err)
		}
		done(nil)
	}
}

func okFn(context.Context) error { return nil }

func BenchmarkExecute(b *testing.B) {
	br, err := New(Config{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := br.Execute(ctx, okFn); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExecuteParallel(b *testing.B) {
	br, err := New(Config{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := br.Execute(ctx, okFn); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkRejectOpen(b *testing.B) {
	br, err := New(Config{Name: "bench", ConsecutiveFailures: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	ctx := context.Background()
	br.Execute(ctx, func(context.Context) error { return errBoom })
	b.ReportAllocs()
	for b.Loop() {
		if err := br.Execute(ctx, okFn); err == nil {
			b.Fatal("not rejected")
		}
	}
}

func BenchmarkRejectForced(b *testing.B) {
	br, err := New(Config{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	br.ForceOpen()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := br.Execute(ctx, okFn); err == nil {
			b.Fatal("not rejected")
		}
	}
}

func BenchmarkState(b *testing.B) {
	br, err := New(Config{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	b.ReportAllocs()
	for b.Loop() {
		if br.State() != Closed {
			b.Fatal("not closed")
		}
	}
}

// BenchmarkRejectOpenUntil rejects while OpenUntil holds the breaker open.
func BenchmarkRejectOpenUntil(b *testing.B) {
	br, err := New(Config{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	br.OpenUntil(time.Now().Add(time.Hour))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := br.Execute(ctx, okFn); err == nil {
			b.Fatal("not rejected")
		}
	}
}

// BenchmarkOpenUntilPast starts the half-open period at once, as a shared
// breaker's replica does when it learns of an open period already over.
func BenchmarkOpenUntilPast(b *testing.B) {
	br, err := New(Config{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	b.ReportAllocs()
	for b.Loop() {
		br.OpenUntil(time.Now())
	}
}

// BenchmarkRejectOpenClock rejects by the clock, as an open breaker does.
func BenchmarkRejectOpenClock(b *testing.B) {
	br, err := New(Config{Name: "bench", ConsecutiveFailures: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	ctx := context.Background()
	br.Execute(ctx, func(context.Context) error { return errBoom })
	b.ReportAllocs()
	for b.Loop() {
		if err := br.Execute(ctx, okFn); err == nil {
			b.Fatal("not rejected")
		}
	}
}

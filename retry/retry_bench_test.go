package retry

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/metric/noop"
)

func BenchmarkExecuteSuccess(b *testing.B) {
	r, _ := New(Config{MeterProvider: noop.NewMeterProvider()})
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Execute(ctx, fn)
	}
}

// The floor for the success path: the attempt context alone.
func BenchmarkWithValue(b *testing.B) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		_ = fn(context.WithValue(ctx, benchKey{}, 1))
	}
}

type benchKey struct{}

var errBench = errors.New("transient")

// Three failures, then a success, with no waits: the cost of the retry
// machinery itself.
func BenchmarkExecuteThreeFailuresZeroBackoff(b *testing.B) {
	r, _ := New(Config{
		MaxAttempts:   4,
		MeterProvider: noop.NewMeterProvider(),
		NewSchedule:   zeroWaits,
	})
	ctx := context.Background()
	n := 0
	fn := func(context.Context) error {
		n++
		if n%4 != 0 {
			return errBench
		}
		return nil
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Execute(ctx, fn)
	}
}

// The same with the default exponential schedule built (waits of 1ns).
func BenchmarkExecuteThreeFailuresExponential(b *testing.B) {
	r, _ := New(Config{
		MaxAttempts:     4,
		InitialInterval: 1,
		MaxInterval:     1,
		Jitter:          noJitter,
		MeterProvider:   noop.NewMeterProvider(),
	})
	ctx := context.Background()
	n := 0
	fn := func(context.Context) error {
		n++
		if n%4 != 0 {
			return errBench
		}
		return nil
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Execute(ctx, fn)
	}
}

// The naive reference: backoff.Retry with a fresh ZeroBackOff, the same
// three failures (no context, no attempt number, no telemetry).
func BenchmarkBackoffRetryZero(b *testing.B) {
	n := 0
	op := func() error {
		n++
		if n%4 != 0 {
			return errBench
		}
		return nil
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = backoff.Retry(op, &backoff.ZeroBackOff{})
	}
}

// The success path with a Budget: one deposit (the mutex, a clock read and
// the decay) more than BenchmarkExecuteSuccess.
func BenchmarkExecuteSuccessBudget(b *testing.B) {
	bud, _ := NewBudget(BudgetConfig{})
	r, _ := New(Config{MeterProvider: noop.NewMeterProvider(), Budget: bud})
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Execute(ctx, fn)
	}
}

// The success path from every P at once, without and with one shared
// Budget: the deposit's mutex is the one lock every caller takes.
func BenchmarkExecuteSuccessParallel(b *testing.B) {
	r, _ := New(Config{MeterProvider: noop.NewMeterProvider()})
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			_ = r.Execute(ctx, fn)
		}
	})
}

func BenchmarkExecuteSuccessBudgetParallel(b *testing.B) {
	bud, _ := NewBudget(BudgetConfig{})
	r, _ := New(Config{MeterProvider: noop.NewMeterProvider(), Budget: bud})
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			_ = r.Execute(ctx, fn)
		}
	})
}

// The retry path's budget cost: a deposit and a withdrawal (a clock read,
// the mutex, the decay), against BenchmarkExecuteThreeFailuresZeroBackoff
// with one failure.
func BenchmarkBudgetDepositWithdraw(b *testing.B) {
	bud, _ := NewBudget(BudgetConfig{Ratio: 1})
	b.ReportAllocs()
	for b.Loop() {
		bud.Deposit()
		bud.TryWithdraw()
	}
}

// Budget.Deposit beside one atomic add on a shared word, the least a
// shared count costs, alone and from 32 x GOMAXPROCS goroutines: run with
// -bench BudgetDeposit and compare with `benchstat -col /impl`.
func BenchmarkBudgetDeposit(b *testing.B) {
	budget, _ := NewBudget(BudgetConfig{})
	var shared struct {
		_ [64]byte
		n atomic.Int64
		_ [56]byte
	}
	impls := []struct {
		name    string
		deposit func()
	}{
		{"word", func() { shared.n.Add(1) }},
		{"budget", budget.Deposit},
	}
	for _, impl := range impls {
		b.Run("mode=seq/impl="+impl.name, func(b *testing.B) {
			for b.Loop() {
				impl.deposit()
			}
		})
		b.Run("mode=parallel/impl="+impl.name, func(b *testing.B) {
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					impl.deposit()
				}
			})
		})
	}
}

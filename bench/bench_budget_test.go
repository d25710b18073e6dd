package bench

import (
	"context"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	fsbudget "github.com/failsafe-go/failsafe-go/budget"
	fshedge "github.com/failsafe-go/failsafe-go/hedgepolicy"
	fsretry "github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/watertight/watertight/hedge"
	"github.com/watertight/watertight/retry"
)

// The success-path cost of a retry budget: each library's retry alone, on
// the success path, without and with a budget (watertight's retry.Budget
// at its defaults, shared by every call; failsafe-go's budget.New()), for
// `benchstat -col /budget`. Watertight's target: a budget adds at most
// 250 ns to a call that never retries (its deposit locks the Budget's
// mutex and reads the clock), sequential and under RunParallel (32 x
// GOMAXPROCS goroutines sharing one Retry and one Budget).

func wtRetryBudget(tb testing.TB) *retry.Retry {
	b := must[*retry.Budget](tb)(retry.NewBudget(retry.BudgetConfig{}))
	return must[*retry.Retry](tb)(retry.New(retry.Config{
		Name:        "r",
		MaxAttempts: maxAttempts,
		NewSchedule: func() backoff.BackOff { return &backoff.ZeroBackOff{} },
		Budget:      b,
	}))
}

func fsRetryBudget() fsretry.RetryPolicy[any] {
	return fsretry.NewBuilder[any]().WithMaxAttempts(maxAttempts).WithDelay(0).WithBudget(fsbudget.New()).Build()
}

func BenchmarkRetryBudget(b *testing.B) {
	b.Run("lib=watertight/budget=off", func(b *testing.B) {
		r := wtRetry(b, nil)
		seq(b, nil, func() error { return r.Execute(bg, work) })
	})
	b.Run("lib=watertight/budget=on", func(b *testing.B) {
		r := wtRetryBudget(b)
		seq(b, nil, func() error { return r.Execute(bg, work) })
	})
	b.Run("lib=failsafe/budget=off", func(b *testing.B) {
		ex := fsExec(fsRetry())
		seq(b, nil, func() error { return ex.RunWithExecution(fsWork) })
	})
	b.Run("lib=failsafe/budget=on", func(b *testing.B) {
		ex := fsExec(fsRetryBudget())
		seq(b, nil, func() error { return ex.RunWithExecution(fsWork) })
	})
}

func BenchmarkRetryBudgetParallel(b *testing.B) {
	b.Run("lib=watertight/budget=off", func(b *testing.B) {
		r := wtRetry(b, nil)
		par(b, func() error { return r.Execute(bg, work) })
	})
	b.Run("lib=watertight/budget=on", func(b *testing.B) {
		r := wtRetryBudget(b)
		par(b, func() error { return r.Execute(bg, work) })
	})
	b.Run("lib=failsafe/budget=off", func(b *testing.B) {
		ex := fsExec(fsRetry())
		par(b, func() error { return ex.RunWithExecution(fsWork) })
	})
	b.Run("lib=failsafe/budget=on", func(b *testing.B) {
		ex := fsExec(fsRetryBudget())
		par(b, func() error { return ex.RunWithExecution(fsWork) })
	})
}

// The success-path cost of a hedge that never fires (the attempt answers
// long before the delay), against plain retry: each attempt of a hedge
// runs in a goroutine of its own, with a timer for the delay. failsafe-go's
// hedgepolicy with the same delay is beside it.
func BenchmarkHedge(b *testing.B) {
	b.Run("lib=watertight/op=retry", func(b *testing.B) {
		r := wtRetry(b, nil)
		seq(b, nil, func() error { return r.Execute(bg, work) })
	})
	b.Run("lib=watertight/op=hedge", func(b *testing.B) {
		h := wtHedge(b)
		seq(b, nil, func() error { _, err := hedge.Do(bg, h, nil, workStruct); return err })
	})
	b.Run("lib=watertight/op=hedged", func(b *testing.B) {
		h := wtHedge(b)
		seq(b, nil, func() error { _, err := hedge.Do(bg, h, nil, workValue); return err })
	})
	b.Run("lib=failsafe/op=hedge", func(b *testing.B) {
		ex := fsExec(fshedge.NewWithDelay[any](time.Hour))
		seq(b, nil, func() error { return ex.RunWithExecution(fsWork) })
	})
}

func BenchmarkHedgeParallel(b *testing.B) {
	b.Run("lib=watertight/op=retry", func(b *testing.B) {
		r := wtRetry(b, nil)
		par(b, func() error { return r.Execute(bg, work) })
	})
	b.Run("lib=watertight/op=hedge", func(b *testing.B) {
		h := wtHedge(b)
		par(b, func() error { _, err := hedge.Do(bg, h, nil, workStruct); return err })
	})
	b.Run("lib=watertight/op=hedged", func(b *testing.B) {
		h := wtHedge(b)
		par(b, func() error { _, err := hedge.Do(bg, h, nil, workValue); return err })
	})
	b.Run("lib=failsafe/op=hedge", func(b *testing.B) {
		ex := fsExec(fshedge.NewWithDelay[any](time.Hour))
		par(b, func() error { return ex.RunWithExecution(fsWork) })
	})
}

// workValue is work with a value, as hedge.Do runs it.
func workValue(ctx context.Context) (int, error) { return 1, work(ctx) }

// workStruct is work with no value, as a call that returns only an error.
func workStruct(ctx context.Context) (struct{}, error) { return struct{}{}, work(ctx) }

func wtHedge(tb testing.TB) *hedge.Hedge {
	return must[*hedge.Hedge](tb)(hedge.New(hedge.Config{Name: "h", Delay: time.Hour}))
}

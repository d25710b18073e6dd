package bench

import (
	"context"
	"testing"
	"time"

	fsbudget "github.com/failsafe-go/failsafe-go/budget"
	fshedge "github.com/failsafe-go/failsafe-go/hedgepolicy"
	fsretry "github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// The success-path cost of a retry budget: each library's retry alone, on
// the success path, without and with a budget (watertight's retry.Budget
// at its defaults, shared by every call; failsafe-go's budget.New()), for
// `benchstat -col /budget`. Watertight's target: a budget adds at most
// 20 ns to a call that never retries, sequential and under RunParallel
// (32 x GOMAXPROCS goroutines sharing one Retry and one Budget).

func wtRetryBudget(tb testing.TB) *retry.Retry {
	b := must[*retry.Budget](tb)(retry.NewBudget(retry.BudgetConfig{}))
	return must[*retry.Retry](tb)(retry.New(retry.Config{
		Name:        "r",
		MaxAttempts: maxAttempts,
		NewSchedule: func() retry.Schedule { return retry.ScheduleFunc(noWait) },
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
		seq(b, nil, func() error { return h.Execute(bg, work) })
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
		par(b, func() error { return h.Execute(bg, work) })
	})
	b.Run("lib=failsafe/op=hedge", func(b *testing.B) {
		ex := fsExec(fshedge.NewWithDelay[any](time.Hour))
		par(b, func() error { return ex.RunWithExecution(fsWork) })
	})
}

func wtHedge(tb testing.TB) *retry.Hedge {
	return must[*retry.Hedge](tb)(retry.NewHedge(retry.HedgeConfig{Name: "h", Delay: time.Hour}))
}

// The cost of policy.Do over Execute on the success path once a hedge
// exists somewhere in the process (a Claimer has been put in a context),
// on policies that never hedge (a Retry; the composed pipeline of
// BenchmarkComposed), called with an 8-deep context, as a request's
// context often is. Do's own closure is paid on both sides: op=execute
// runs the same closure, which publishes its value. Watertight's target:
// op=do within a few ns of op=execute (before, Do looked for the claim
// through the whole context chain on every call).
func BenchmarkDoClaim(b *testing.B) {
	policy.WithClaimer(bg, claimAll{}) // a hedge exists in the process
	ctx := bg
	for i := range 8 {
		ctx = context.WithValue(ctx, depthKey(i), i)
	}
	b.Run("policy=retry", func(b *testing.B) {
		doClaim(b, ctx, wtRetry(b, nil))
	})
	b.Run("policy=composed", func(b *testing.B) {
		doClaim(b, ctx, wtComposed(b, providers{}))
	})
}

func doClaim(b *testing.B, ctx context.Context, p policy.Policy) {
	var out int
	b.Run("op=execute", func(b *testing.B) {
		seq(b, nil, func() error {
			return p.Execute(ctx, func(context.Context) error { out = 1; return nil })
		})
	})
	b.Run("op=do", func(b *testing.B) {
		seq(b, nil, func() error {
			v, err := policy.Do(ctx, p, func(context.Context) (int, error) { return 1, nil })
			out = v
			return err
		})
	})
	sinkInt = out
}

var sinkInt int

// depthKey keys the values of BenchmarkDoClaim's deep context.
type depthKey int

// claimAll is a Claimer that grants every claim.
type claimAll struct{}

func (claimAll) Claim() bool { return true }

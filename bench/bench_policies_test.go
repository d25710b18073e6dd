package bench

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	fsbulkhead "github.com/failsafe-go/failsafe-go/bulkhead"
	fsbreaker "github.com/failsafe-go/failsafe-go/circuitbreaker"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
)

// Side-by-side benchmarks: each pairs BenchmarkX/lib=watertight with
// BenchmarkX/lib=failsafe, for `benchstat -col /lib`. Policies and
// executors are built once, outside the loop; the work is a no-op that
// receives the call's ctx.

// sink keeps results alive.
var sink error

// seq runs call b.N times and fails b if it returns an error other than
// want (nil for the success path).
func seq(b *testing.B, want error, call func() error) {
	b.Helper()
	b.ReportAllocs()
	if err := call(); !errors.Is(err, want) {
		b.Fatalf("got %v, want %v", err, want)
	}
	b.ResetTimer()
	var err error
	for b.Loop() {
		err = call()
	}
	sink = err
}

// par runs call under b.RunParallel with 32 x GOMAXPROCS goroutines.
func par(b *testing.B, call func() error) {
	b.Helper()
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := call(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkBulkhead(b *testing.B) {
	b.Run("lib=watertight", func(b *testing.B) {
		bh := wtBulkhead(b, bigLimit, 0, 0, nil)
		seq(b, nil, func() error { return bh.Execute(bg, work) })
	})
	b.Run("lib=failsafe", func(b *testing.B) {
		ex := fsExec(fsBulkhead(bigLimit, 0))
		seq(b, nil, func() error { return ex.RunWithExecution(fsWork) })
	})
}

// BenchmarkBulkheadPriority is BenchmarkBulkhead's watertight case with a
// priority: none, or a critical call's ctx against a bulkhead that reserves
// 1 slot for critical calls (the priority is then read on every call).
func BenchmarkBulkheadPriority(b *testing.B) {
	b.Run("ctx=none", func(b *testing.B) {
		bh := wtBulkhead(b, bigLimit, 0, 0, nil)
		seq(b, nil, func() error { return bh.Execute(bg, work) })
	})
	b.Run("ctx=critical", func(b *testing.B) {
		bh, err := bulkhead.New(bulkhead.Config{Limit: bigLimit, Reserve: map[policy.Priority]int{policy.PriorityCritical: 1}})
		if err != nil {
			b.Fatal(err)
		}
		defer bh.Close()
		ctx := policy.WithPriority(bg, policy.PriorityCritical)
		seq(b, nil, func() error { return bh.Execute(ctx, work) })
	})
}

func BenchmarkTimeout(b *testing.B) {
	b.Run("lib=watertight", func(b *testing.B) {
		d := wtDeadline(b, nil)
		seq(b, nil, func() error { return d.Execute(bg, work) })
	})
	b.Run("lib=failsafe", func(b *testing.B) {
		ex := fsExec(fsTimeout())
		seq(b, nil, func() error { return ex.RunWithExecution(fsWork) })
	})
}

func BenchmarkRetry(b *testing.B) {
	b.Run("lib=watertight", func(b *testing.B) {
		r := wtRetry(b, nil)
		seq(b, nil, func() error { return r.Execute(bg, work) })
	})
	b.Run("lib=failsafe", func(b *testing.B) {
		ex := fsExec(fsRetry())
		seq(b, nil, func() error { return ex.RunWithExecution(fsWork) })
	})
}

func BenchmarkBreaker(b *testing.B) {
	b.Run("lib=watertight", func(b *testing.B) {
		c := wtBreaker(b, nil)
		seq(b, nil, func() error { return c.Execute(bg, work) })
	})
	b.Run("lib=failsafe", func(b *testing.B) {
		ex := fsExec(fsBreaker())
		seq(b, nil, func() error { return ex.RunWithExecution(fsWork) })
	})
}

// BenchmarkBreakerSlow is the breaker's success path without and with the
// slow rule (SlowCallDuration 10s, SlowCallRatio 0.5): what the rule's
// clock read and its watch of the calls in flight cost.
func BenchmarkBreakerSlow(b *testing.B) {
	for _, rule := range []bool{false, true} {
		b.Run("rule="+map[bool]string{false: "off", true: "on"}[rule], func(b *testing.B) {
			cfg := breaker.Config{Name: "c", ConsecutiveFailures: breakerFailures, OpenTimeout: breakerOpen}
			if rule {
				cfg.SlowCallDuration, cfg.SlowCallRatio = 10*time.Second, 0.5
			}
			c := must[*breaker.Breaker](b)(breaker.New(cfg))
			b.Cleanup(func() { c.Close() })
			seq(b, nil, func() error { return c.Execute(bg, work) })
		})
	}
}

// BenchmarkComposed is bulkhead + deadline/timeout 1m + retry 3 + breaker,
// on the success path, one goroutine.
func BenchmarkComposed(b *testing.B) {
	b.Run("lib=watertight", func(b *testing.B) {
		p := wtComposed(b, providers{})
		seq(b, nil, func() error { return p.Execute(bg, work) })
	})
	b.Run("lib=failsafe", func(b *testing.B) {
		ex := fsComposed()
		seq(b, nil, func() error { return ex.RunWithExecution(fsWork) })
	})
}

// BenchmarkComposedParallel is BenchmarkComposed with 32 x GOMAXPROCS
// goroutines sharing one pipeline (the bulkhead limit is above that).
func BenchmarkComposedParallel(b *testing.B) {
	b.Run("lib=watertight", func(b *testing.B) {
		p := wtComposed(b, providers{})
		par(b, func() error { return p.Execute(bg, work) })
	})
	b.Run("lib=failsafe", func(b *testing.B) {
		ex := fsComposed()
		par(b, func() error { return ex.RunWithExecution(fsWork) })
	})
}

// BenchmarkRejectBulkheadFull: limit 1, no queue, the slot held by a
// goroutine blocked in fn; every measured call is rejected at once.
func BenchmarkRejectBulkheadFull(b *testing.B) {
	b.Run("lib=watertight", func(b *testing.B) {
		bh := wtBulkhead(b, 1, 0, 0, nil)
		holdSlot(b, func(fn func(context.Context) error) { bh.Execute(bg, fn) })
		mustReject(b, bulkhead.ErrFull, func(ctx context.Context) error { return bh.Execute(ctx, work) })
		seq(b, bulkhead.ErrFull, func() error { return bh.Execute(bg, work) })
	})
	b.Run("lib=failsafe", func(b *testing.B) {
		ex := fsExec(fsBulkhead(1, 0))
		holdSlot(b, func(fn func(context.Context) error) { ex.RunWithExecution(fsFunc(fn)) })
		mustReject(b, fsbulkhead.ErrFull, func(ctx context.Context) error {
			return ex.WithContext(ctx).RunWithExecution(fsWork)
		})
		seq(b, fsbulkhead.ErrFull, func() error { return ex.RunWithExecution(fsWork) })
	})
}

// mustReject fails b unless call, given a ctx that ends in a second, is
// rejected with want at once: a bulkhead that queued instead would hang the
// measured loop.
func mustReject(b *testing.B, want error, call func(ctx context.Context) error) {
	b.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	if err := call(ctx); !errors.Is(err, want) {
		b.Fatalf("a call to a full bulkhead: got %v, want %v", err, want)
	}
}

// BenchmarkRejectBreakerOpen: the breaker opened by hand; every measured
// call is rejected at once.
func BenchmarkRejectBreakerOpen(b *testing.B) {
	b.Run("lib=watertight", func(b *testing.B) {
		c := wtBreaker(b, nil)
		c.ForceOpen()
		seq(b, policy.ErrRejected, func() error { return c.Execute(bg, work) })
	})
	b.Run("lib=failsafe", func(b *testing.B) {
		cb := fsBreaker()
		cb.Open()
		ex := fsExec(cb)
		seq(b, fsbreaker.ErrOpen, func() error { return ex.RunWithExecution(fsWork) })
	})
}

// BenchmarkRetryFailing: every attempt fails, 3 attempts, no wait between
// them (watertight: a schedule of zero waits; failsafe: WithDelay(0)).
func BenchmarkRetryFailing(b *testing.B) {
	b.Run("lib=watertight", func(b *testing.B) {
		r := wtRetry(b, nil)
		seq(b, errBoom, func() error { return r.Execute(bg, fail) })
	})
	b.Run("lib=failsafe", func(b *testing.B) {
		ex := fsExec(fsRetry())
		seq(b, errBoom, func() error { return ex.RunWithExecution(fsFail) })
	})
}

// yieldWork holds its slot across a scheduler yield, so that other
// goroutines pile up behind a small bulkhead and every release is a
// hand-off to a waiter.
func yieldWork(context.Context) error {
	runtime.Gosched()
	return nil
}

func fsYieldWork(e failsafe.Execution[any]) error { return yieldWork(e.Context()) }

// BenchmarkBulkheadHandoff: limit 2, unbounded queue, 32 x GOMAXPROCS
// goroutines: the cost of waiting and of handing a slot over.
func BenchmarkBulkheadHandoff(b *testing.B) {
	b.Run("lib=watertight", func(b *testing.B) {
		bh := wtBulkhead(b, 2, bulkhead.Unbounded, 0, nil)
		par(b, func() error { return bh.Execute(bg, yieldWork) })
	})
	b.Run("lib=failsafe", func(b *testing.B) {
		ex := fsExec(fsBulkhead(2, time.Hour))
		par(b, func() error { return ex.RunWithExecution(fsYieldWork) })
	})
}

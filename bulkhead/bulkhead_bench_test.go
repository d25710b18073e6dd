package bulkhead

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/watertight/watertight/policy"
)

// The benchmarks use the no-op MeterProvider: the cost measured is the
// bulkhead's own. Each has a naive channel-semaphore reference beside it.

func noopFn(context.Context) error { return nil }

func benchNew(b *testing.B, cfg Config) *Bulkhead {
	b.Helper()
	cfg.MeterProvider = noop.NewMeterProvider()
	bh, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bh.Close() })
	return bh
}

// chanSem is the naive reference: a buffered channel used as a semaphore.
type chanSem chan struct{}

func (s chanSem) execute(ctx context.Context, fn func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case s <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s }()
	return fn(ctx)
}

func (s chanSem) try(ctx context.Context, fn func(context.Context) error) error {
	select {
	case s <- struct{}{}:
	default:
		return ErrFull
	}
	defer func() { <-s }()
	return fn(ctx)
}

func BenchmarkExecute(b *testing.B) {
	ctx := context.Background()
	b.Run("bulkhead", func(b *testing.B) {
		bh := benchNew(b, Config{Limit: 10})
		b.ReportAllocs()
		for b.Loop() {
			bh.Execute(ctx, noopFn)
		}
	})
	b.Run("bulkhead/cancelCtx", func(b *testing.B) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		bh := benchNew(b, Config{Limit: 10})
		b.ReportAllocs()
		for b.Loop() {
			bh.Execute(ctx, noopFn)
		}
	})
	b.Run("stage", func(b *testing.B) {
		bh := benchNew(b, Config{Limit: 10})
		b.ReportAllocs()
		for b.Loop() {
			ctx, tok, err := bh.Enter(ctx)
			if err == nil {
				bh.Exit(ctx, tok, noopFn(ctx))
			}
		}
	})
	b.Run("chansem", func(b *testing.B) {
		s := make(chanSem, 10)
		b.ReportAllocs()
		for b.Loop() {
			s.execute(ctx, noopFn)
		}
	})
	// Without the select on ctx.Done: the cheapest a channel can be.
	b.Run("chansem/noctx", func(b *testing.B) {
		s := make(chanSem, 10)
		b.ReportAllocs()
		for b.Loop() {
			func() {
				s <- struct{}{}
				defer func() { <-s }()
				noopFn(ctx)
			}()
		}
	})
}

func BenchmarkExecuteParallel(b *testing.B) {
	ctx := context.Background()
	limit := 4 * runtime.GOMAXPROCS(0) // RunParallel's goroutines never fill it
	b.Run("bulkhead", func(b *testing.B) {
		bh := benchNew(b, Config{Limit: limit})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bh.Execute(ctx, noopFn)
			}
		})
	})
	b.Run("chansem", func(b *testing.B) {
		s := make(chanSem, limit)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s.execute(ctx, noopFn)
			}
		})
	})
}

func BenchmarkRejectFull(b *testing.B) {
	ctx := context.Background()
	b.Run("bulkhead", func(b *testing.B) {
		bh := benchNew(b, Config{Limit: 1})
		bh.Enter(ctx)
		defer bh.Exit(ctx, Permit{}, nil)
		b.ReportAllocs()
		for b.Loop() {
			if bh.Execute(ctx, noopFn) == nil {
				b.Fatal("not rejected")
			}
		}
	})
	b.Run("bulkhead/globalMeter", func(b *testing.B) {
		bh, _ := New(Config{Limit: 1})
		defer bh.Close()
		bh.Enter(ctx)
		defer bh.Exit(ctx, Permit{}, nil)
		b.ReportAllocs()
		for b.Loop() {
			if bh.Execute(ctx, noopFn) == nil {
				b.Fatal("not rejected")
			}
		}
	})
	b.Run("chansem", func(b *testing.B) {
		s := make(chanSem, 1)
		s <- struct{}{}
		b.ReportAllocs()
		for b.Loop() {
			if s.try(ctx, noopFn) == nil {
				b.Fatal("not rejected")
			}
		}
	})
}

// BenchmarkHandOff has many goroutines share a few slots, so most calls
// wait and are handed a slot by a release.
func BenchmarkHandOff(b *testing.B) {
	ctx := context.Background()
	const limit = 2
	work := func(context.Context) error {
		runtime.Gosched() // hold the slot long enough for others to queue
		return nil
	}
	b.Run("bulkhead", func(b *testing.B) {
		bh := benchNew(b, Config{Limit: limit, MaxQueue: Unbounded})
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bh.Execute(ctx, work)
			}
		})
	})
	b.Run("chansem", func(b *testing.B) {
		s := make(chanSem, limit)
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s.execute(ctx, work)
			}
		})
	})
}

// queueWaiters fills bh (limit 1, held by the caller) with n waiting
// goroutines and returns a function that releases them all.
func queueWaiters(b *testing.B, bh *Bulkhead, n int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { bh.Execute(ctx, noopFn) })
	}
	for bh.Queued() != n {
		runtime.Gosched()
	}
	return func() { cancel(); wg.Wait() }
}

// BenchmarkCancelWaiter measures one waiter joining the back of a queue of
// n and cancelling: O(1), the same for every n.
func BenchmarkCancelWaiter(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		// The whole path: a goroutine queues, its ctx is cancelled, it
		// unlinks itself and returns. Dominated by goroutine scheduling.
		b.Run(fmt.Sprintf("goroutine/queued=%d", n), func(b *testing.B) {
			bh := benchNew(b, Config{Limit: 1, MaxQueue: Unbounded})
			bh.Enter(context.Background())
			stop := queueWaiters(b, bh, n)
			done := make(chan error)
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithCancel(context.Background())
				go func() { _, _, err := bh.Enter(ctx); done <- err }()
				for bh.Queued() != n+1 {
					runtime.Gosched()
				}
				cancel()
				if <-done != context.Canceled {
					b.Fatal("waiter not cancelled")
				}
			}
			b.StopTimer()
			bh.Exit(context.Background(), Permit{}, nil)
			stop()
		})
	}
	// The naive reference, for scale: the runtime unlinks a cancelled
	// sender from the channel's wait queue in O(1) too, but the channel
	// cannot hand off in order, report its queue or bound it.
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("chansem/queued=%d", n), func(b *testing.B) {
			s := make(chanSem, 1)
			s <- struct{}{}
			ctx0, cancel0 := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() { s.execute(ctx0, noopFn) })
			}
			runtime.Gosched()
			done := make(chan error)
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithCancel(context.Background())
				go func() { done <- s.execute(ctx, noopFn) }()
				runtime.Gosched()
				cancel()
				<-done
			}
			b.StopTimer()
			cancel0()
			<-s
			wg.Wait()
		})
	}
}

// BenchmarkExecuteKeyed is BenchmarkExecute's bulkhead case with a key in
// ctx: without a fair share, with one (nobody waits: the path takes no
// lock), and with a cap per key (every call counts its key under the
// lock).
func BenchmarkExecuteKeyed(b *testing.B) {
	ctx := policy.WithKey(context.Background(), "tenant-42")
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"plain", Config{Limit: 10}},
		{"fair", Config{Limit: 10, FairShare: true}},
		{"fair+cap", Config{Limit: 10, FairShare: true, MaxPerKey: 5}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			bh := benchNew(b, tc.cfg)
			b.ReportAllocs()
			for b.Loop() {
				bh.Execute(ctx, noopFn)
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			cfg := tc.cfg
			cfg.Limit = 4 * runtime.GOMAXPROCS(0)
			bh := benchNew(b, cfg)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					bh.Execute(ctx, noopFn)
				}
			})
		})
	}
}

package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"

	"github.com/watertight/watertight/bulkhead"
)

// Scaling curves. The watertight targets: per-op cost within 2x from 10 to
// 10000 queued waiters, and contended per-op cost at 1000 goroutines at most
// twice that at 2.

var (
	waiterCounts    = []int{10, 100, 1000, 10000}
	goroutineCounts = []int{2, 16, 128, 1000}
)

// fsQueuedRun returns a call through a new failsafe bulkhead of limit that
// waits up to an hour (failsafe-go cannot wait without a max wait, and pays
// a timer per waiting call for it).
func fsQueuedRun(limit int, fn func(failsafe.Execution[any]) error) func() error {
	ex := fsExec(fsBulkhead(uint(limit), time.Hour))
	return func() error { return ex.RunWithExecution(fn) }
}

// BenchmarkScaleQueued is the cost of one acquire/release with N waiters
// queued: N+1 goroutines cycle through a bulkhead of limit 1, so that every
// release hands the slot to the oldest of about N waiters. ns/op is wall
// time per completed call. Up to N calls beyond b.N finish after the count
// runs out, a bias against large N of at most N/b.N.
func BenchmarkScaleQueued(b *testing.B) {
	for _, n := range waiterCounts {
		b.Run(fmt.Sprintf("waiters=%d/lib=watertight", n), func(b *testing.B) {
			bh := wtBulkhead(b, 1, bulkhead.Unbounded, 0, nil)
			cycle(b, n+1, func(fn func(context.Context) error) func() error {
				return func() error { return bh.Execute(bg, fn) }
			})
		})
		b.Run(fmt.Sprintf("waiters=%d/lib=failsafe", n), func(b *testing.B) {
			cycle(b, n+1, func(fn func(context.Context) error) func() error {
				return fsQueuedRun(1, fsFunc(fn))
			})
		})
	}
}

// cycle runs g goroutines that call until b.N calls have run fn. mk builds,
// once per goroutine (outside the measured loop), the call for a fn.
func cycle(b *testing.B, g int, mk func(fn func(context.Context) error) func() error) {
	b.ReportAllocs()
	var remaining atomic.Int64
	remaining.Store(int64(b.N))
	count := func(context.Context) error {
		remaining.Add(-1)
		return nil
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range g {
		call := mk(count)
		wg.Go(func() {
			<-start
			for remaining.Load() > 0 {
				if err := call(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.ResetTimer()
	close(start)
	wg.Wait()
}

// parkWaiters starts n goroutines queued behind a bulkhead whose slots are
// all held (run must block while the bulkhead is full), and waits until
// they are queued: by queued() when the library can tell, or else by
// giving them time to park. They leave at cleanup, by cancellation.
func parkWaiters(b *testing.B, n int, run func(ctx context.Context) error, queued func() int) {
	ctx, cancel := context.WithCancel(bg)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { run(ctx) })
	}
	if queued != nil {
		for queued() < n {
			time.Sleep(100 * time.Microsecond)
		}
	} else {
		for runtime.NumGoroutine() < n {
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(20*time.Millisecond + time.Duration(n)*time.Microsecond)
	}
	b.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// timeoutWait is how long the measured waiter of BenchmarkScaleWaiterTimeout
// waits. It must be long enough for both libraries to reach their queue
// before it passes (at 1 µs, failsafe-go's per-call overhead used it up and
// it returned before queuing), so the op is mostly timer latency: read the
// trend over N, not the level.
const timeoutWait = 50 * time.Microsecond

// BenchmarkScaleWaiterTimeout is the cost of one caller that queues behind N
// waiters and gives up when its ctx deadline passes (timeoutWait), removing
// itself from the queue. Both libraries pay a context.WithTimeout per op, and
// failsafe-go an Executor.WithContext copy.
func BenchmarkScaleWaiterTimeout(b *testing.B) {
	for _, n := range waiterCounts {
		b.Run(fmt.Sprintf("waiters=%d/lib=watertight", n), func(b *testing.B) {
			bh := wtBulkhead(b, 1, bulkhead.Unbounded, 0, nil)
			holdSlot(b, func(fn func(context.Context) error) { bh.Execute(bg, fn) })
			parkWaiters(b, n, func(ctx context.Context) error { return bh.Execute(ctx, work) }, bh.Queued)
			timeoutLoop(b, func(ctx context.Context) error { return bh.Execute(ctx, work) })
		})
		b.Run(fmt.Sprintf("waiters=%d/lib=failsafe", n), func(b *testing.B) {
			ex := failsafe.With[any](fsBulkhead(1, time.Hour))
			holdSlot(b, func(fn func(context.Context) error) { ex.RunWithExecution(fsFunc(fn)) })
			parkWaiters(b, n, func(ctx context.Context) error { return ex.WithContext(ctx).RunWithExecution(fsWork) }, nil)
			timeoutLoop(b, func(ctx context.Context) error { return ex.WithContext(ctx).RunWithExecution(fsWork) })
		})
	}
}

func timeoutLoop(b *testing.B, call func(ctx context.Context) error) {
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(bg, timeoutWait)
		err := call(ctx)
		cancel()
		if err == nil {
			b.Fatal("a call ran while the bulkhead was full")
		}
	}
}

// lateCtx is a context that is not done when first asked (so the caller is
// admitted to the queue) but whose Done channel is already closed (so it
// leaves at once): the cost of joining and leaving a queue of N, without
// the scheduler's cost of parking and waking the goroutine.
type lateCtx struct {
	context.Context
	asked int
}

var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (c *lateCtx) Done() <-chan struct{} { return closed }

func (c *lateCtx) Err() error {
	c.asked++
	if c.asked == 1 {
		return nil
	}
	return context.Canceled
}

// BenchmarkScaleWaiterCancel is the cost of a caller that joins a queue of N
// waiters and is cancelled while queued (see lateCtx). watertight only:
// failsafe-go's channel semaphore looks at ctx.Done() before it queues, so
// a lateCtx never reaches its queue.
func BenchmarkScaleWaiterCancel(b *testing.B) {
	for _, n := range waiterCounts {
		b.Run(fmt.Sprintf("waiters=%d/lib=watertight", n), func(b *testing.B) {
			bh := wtBulkhead(b, 1, bulkhead.Unbounded, 0, nil)
			holdSlot(b, func(fn func(context.Context) error) { bh.Execute(bg, fn) })
			parkWaiters(b, n, func(ctx context.Context) error { return bh.Execute(ctx, work) }, bh.Queued)
			ctx := &lateCtx{Context: bg}
			b.ReportAllocs()
			for b.Loop() {
				ctx.asked = 0
				if err := bh.Execute(ctx, work); err != context.Canceled {
					b.Fatalf("got %v, want context.Canceled", err)
				}
			}
			if q := bh.Queued(); q != n {
				b.Fatalf("%d queued after the run, want %d", q, n)
			}
		})
	}
}

// BenchmarkScaleContended is the success path of a bulkhead (limit above
// the goroutine count, so nobody waits) shared by G goroutines that split
// b.N calls: ns/op is wall time per call, the inverse of throughput.
func BenchmarkScaleContended(b *testing.B) {
	for _, g := range goroutineCounts {
		b.Run(fmt.Sprintf("g=%d/lib=watertight", g), func(b *testing.B) {
			bh := wtBulkhead(b, bigLimit, 0, 0, nil)
			split(b, g, func() error { return bh.Execute(bg, work) })
		})
		b.Run(fmt.Sprintf("g=%d/lib=failsafe", g), func(b *testing.B) {
			ex := fsExec(fsBulkhead(bigLimit, 0))
			split(b, g, func() error { return ex.RunWithExecution(fsWork) })
		})
	}
}

// BenchmarkScaleContendedComposed is BenchmarkScaleContended for the four
// composed.
func BenchmarkScaleContendedComposed(b *testing.B) {
	for _, g := range goroutineCounts {
		b.Run(fmt.Sprintf("g=%d/lib=watertight", g), func(b *testing.B) {
			p := wtComposed(b, providers{})
			split(b, g, func() error { return p.Execute(bg, work) })
		})
		b.Run(fmt.Sprintf("g=%d/lib=failsafe", g), func(b *testing.B) {
			ex := fsComposed()
			split(b, g, func() error { return ex.RunWithExecution(fsWork) })
		})
	}
}

// split runs b.N calls on g goroutines, b.N/g each (the remainder on the
// first ones), all released at once after the timer is reset.
func split(b *testing.B, g int, call func() error) {
	b.ReportAllocs()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range g {
		n := b.N / g
		if i < b.N%g {
			n++
		}
		wg.Go(func() {
			<-start
			for range n {
				if err := call(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.ResetTimer()
	close(start)
	wg.Wait()
}

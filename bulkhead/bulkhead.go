package bulkhead

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// Bulkhead limits the number of calls to one dependency that run at once,
// and lets a bounded number of further calls wait, first come first served,
// for a slot. Create one with [New]; the zero value is not usable.
//
// A Bulkhead is safe for concurrent use by multiple goroutines.
type Bulkhead struct {
	// active counts slots held, including slots handed to a waiter that has
	// not woken yet. It changes with atomics so that the path with nobody
	// waiting takes no lock: an acquire moves it up by compare-and-swap
	// while it is below limit and queued is 0, a release moves it down
	// while queued is 0. Under contention from many goroutines a failed
	// swap just retries, where a mutex would park and wake goroutines.
	active atomic.Int64
	// queued mirrors waiters.len; it is written under mu and read without.
	queued atomic.Int64

	// mu guards waiters and every hand-off of a slot to a waiter. While
	// anyone waits, every acquire and release goes through it, so slots go
	// to waiters in FIFO order.
	mu      sync.Mutex
	waiters waitList

	limit    int
	queueCap int // Config.MaxQueue, with Unbounded as math.MaxInt
	maxWait  time.Duration

	full        *telemetry.Rejection
	waitTimeout *telemetry.Rejection
	onReject    func(ctx context.Context, err *policy.RejectedError)

	closeOnce sync.Once
	reg       metric.Registration // nil if registration failed
}

var _ stage.Stage = (*twoPhase)(nil)

// New returns a Bulkhead configured by cfg, or an error naming the first
// invalid field of cfg. It never panics.
func New(cfg Config) (*Bulkhead, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	in := telemetry.NewInstruments(cfg.MeterProvider)
	b := &Bulkhead{
		limit:       cfg.Limit,
		queueCap:    cfg.queueCap(),
		maxWait:     cfg.MaxWait,
		full:        telemetry.NewRejection(in, Kind, cfg.Name, ReasonFull, ErrFull),
		waitTimeout: telemetry.NewRejection(in, Kind, cfg.Name, ReasonWaitTimeout, ErrFull),
		onReject:    cfg.OnReject,
	}
	b.reg = b.registerObservers(in.Meter, cfg.Name)
	return b, nil
}

// Execute runs fn once it holds a slot, and frees the slot when fn returns,
// panics or calls runtime.Goexit. It returns fn's error unchanged; a
// rejection (errors.Is ErrFull and policy.ErrRejected) if the bulkhead and
// its queue are full or the call waited Config.MaxWait in vain; or ctx.Err()
// if ctx is done on entry or while waiting, in which case fn is not run.
// Execute panics if ctx or fn is nil.
func (b *Bulkhead) Execute(ctx context.Context, fn policy.Func) error {
	// The two phases compose runs (enter, exit), written out so that the
	// success path costs one deferred call and no interface dispatch.
	if ctx == nil {
		panic("bulkhead: nil Context")
	}
	if fn == nil {
		panic("bulkhead: nil fn")
	}
	if err := b.acquire(ctx); err != nil {
		return err
	}
	// A deferred release also runs if fn panics or calls runtime.Goexit,
	// so the slot is never lost; the panic is not recovered.
	defer b.release()
	return fn(ctx)
}

// enter is the first phase compose runs (see internal/stage): it takes a slot, waiting for
// one if the queue allows, with the same outcomes as Execute. On success it
// returns ctx unchanged and a nil token, and the caller must call exit
// exactly once. It panics if ctx is nil.
func (b *Bulkhead) enter(ctx context.Context) (context.Context, stage.Token, error) {
	if ctx == nil {
		panic("bulkhead: nil Context")
	}
	if err := b.acquire(ctx); err != nil {
		return ctx, nil, err
	}
	return ctx, nil, nil
}

// exit is the second phase: it frees the slot enter took
// (handing it to the oldest waiter, if any) and returns err unchanged. Each
// enter must be matched by exactly one exit; exit panics if no slot at all
// is held, which is such a programmer error caught (a second exit while
// other calls hold slots cannot be told apart and frees one of theirs).
func (b *Bulkhead) exit(_ context.Context, _ stage.Token, err error) error {
	b.release()
	return err
}

// Active returns the number of calls holding a slot now, including a waiter
// that has been handed a slot and has not yet woken. It is exact.
func (b *Bulkhead) Active() int {
	return int(b.active.Load())
}

// Queued returns the number of callers waiting for a slot now. It is exact.
func (b *Bulkhead) Queued() int {
	return int(b.queued.Load())
}

// Limit returns Config.Limit.
func (b *Bulkhead) Limit() int { return b.limit }

// acquire takes a slot for one call, waiting if need be.
func (b *Bulkhead) acquire(ctx context.Context) error {
	// Atomic loads for the common contexts: cheap enough to pay every call.
	if err := ctx.Err(); err != nil {
		return err
	}
	// Fast path: nobody waits and a slot is free. Once someone waits, every
	// newcomer goes through mu and queues behind them: no queue jumping.
	if b.queued.Load() == 0 && b.tryTake() {
		return nil
	}
	b.mu.Lock()
	return b.acquireSlow(ctx)
}

// tryTake takes a free slot, if there is one.
func (b *Bulkhead) tryTake() bool {
	limit := int64(b.limit)
	for {
		a := b.active.Load()
		if a >= limit {
			return false
		}
		if b.active.CompareAndSwap(a, a+1) {
			return true
		}
	}
}

// acquireSlow is acquire's path when every slot seemed taken or someone
// waits. b.mu is held on entry and released before it returns.
func (b *Bulkhead) acquireSlow(ctx context.Context) error {
	if b.waiters.len == 0 && b.tryTake() {
		b.mu.Unlock()
		return nil
	}
	if b.waiters.len >= b.queueCap {
		b.mu.Unlock()
		return b.reject(ctx, b.full)
	}
	w := &waiter{ready: make(chan struct{}, 1)}
	b.waiters.pushBack(w)
	b.queued.Store(int64(b.waiters.len))
	// A release on the fast path may have freed a slot between our tryTake
	// and the Store above, having seen queued == 0. Both sides write one
	// atomic and then read the other's (sequentially consistent in Go), so
	// either that release sees queued > 0 and grants under mu, or we see its
	// free slot here and grant it: to the oldest waiter, maybe not us.
	b.grantLocked()
	b.mu.Unlock()
	return b.wait(ctx, w)
}

// wait blocks until w is handed a slot, ctx is done or MaxWait passes.
func (b *Bulkhead) wait(ctx context.Context, w *waiter) error {
	var expired <-chan time.Time
	if b.maxWait > 0 {
		t := time.NewTimer(b.maxWait)
		defer t.Stop()
		expired = t.C
	}
	done := ctx.Done()
	select {
	case <-w.ready:
	case <-done:
		b.abandon(w)
		return ctx.Err()
	case <-expired:
		if !b.expire(w) {
			return b.reject(ctx, b.waitTimeout)
		}
	}
	// We hold a slot. select chooses at random among ready cases, so ctx may
	// have ended too: a caller whose ctx ended while it waited never runs fn,
	// so give the slot back (to the next waiter) as Exit would.
	select {
	case <-done:
		b.release()
		return ctx.Err()
	default:
		return nil
	}
}

// abandon takes w out of the queue after its ctx ended. A release may have
// handed w the slot between ctx ending and abandon taking the mutex: w.granted
// tells, and the mutex makes the answer final. If so, w holds a slot it will
// not use, and passes it on exactly as a release does (to the next waiter,
// or back to the pool), so that no slot is lost and nobody jumps the queue.
// Otherwise w is unlinked in O(1), and no release can reach it afterwards.
func (b *Bulkhead) abandon(w *waiter) {
	b.mu.Lock()
	if w.granted {
		b.handOffLocked()
	} else {
		b.waiters.remove(w)
		b.queued.Store(int64(b.waiters.len))
	}
	b.mu.Unlock()
}

// expire takes w out of the queue after MaxWait passed, and reports whether
// w holds a slot after all. If a release handed w the slot before expire took
// the mutex, w got its slot within MaxWait (the hand-off happened before the
// waiter could act on the timer), so it keeps the slot and runs fn: rejecting
// it now would waste a slot that was fairly its. Otherwise w is unlinked in
// O(1) and will never be handed a slot.
func (b *Bulkhead) expire(w *waiter) (granted bool) {
	b.mu.Lock()
	granted = w.granted
	if !granted {
		b.waiters.remove(w)
		b.queued.Store(int64(b.waiters.len))
	}
	b.mu.Unlock()
	return granted
}

// release frees one slot held by the caller.
func (b *Bulkhead) release() {
	if b.queued.Load() == 0 {
		// Fast path: nobody waits, so the slot goes back to the pool.
		if b.active.Add(-1) < 0 {
			b.active.Add(1)
			panic("bulkhead: slot released twice")
		}
		// A caller may have queued between the Load and the Add, having
		// seen no free slot: see acquireSlow. Hand it the slot now.
		if b.queued.Load() != 0 {
			b.mu.Lock()
			b.grantLocked()
			b.mu.Unlock()
		}
		return
	}
	b.mu.Lock()
	if b.active.Load() <= 0 {
		b.mu.Unlock()
		panic("bulkhead: slot released twice")
	}
	b.handOffLocked()
	b.mu.Unlock()
}

// handOffLocked gives up one held slot: to the oldest waiter if there is one
// (active is left unchanged, so a caller arriving now finds no free slot and
// cannot jump the queue), otherwise back to the pool. b.mu must be held.
func (b *Bulkhead) handOffLocked() {
	if w := b.waiters.popFront(); w != nil {
		b.queued.Store(int64(b.waiters.len))
		w.granted = true
		w.ready <- struct{}{} // buffered, and sent once: never blocks
		return
	}
	b.active.Add(-1)
}

// grantLocked hands free slots, if any, to the oldest waiters. b.mu must be
// held.
func (b *Bulkhead) grantLocked() {
	for b.waiters.len > 0 && b.tryTake() {
		w := b.waiters.popFront()
		b.queued.Store(int64(b.waiters.len))
		w.granted = true
		w.ready <- struct{}{}
	}
}

// reject records a rejection for r and calls the OnReject hook. It must be
// called without b.mu held.
func (b *Bulkhead) reject(ctx context.Context, r *telemetry.Rejection) error {
	err := r.Record(ctx)
	if b.onReject != nil {
		b.onReject(ctx, r.Err)
	}
	return err
}

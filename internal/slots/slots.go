package slots

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight/watertight/deadline"
)

// Outcome is how [Slots.Acquire] ended.
type Outcome uint8

const (
	// Admitted: the caller holds a slot and must call [Slots.Release]
	// exactly once.
	Admitted Outcome = iota
	// CtxDone: ctx was done on entry or while waiting, not by a Deadline's
	// timer; the error is ctx.Err() and no slot is held. It is not a
	// rejection.
	CtxDone
	// RejectedFull: every slot was taken and the queue was full.
	RejectedFull
	// RejectedWaitTimeout: the caller waited MaxWait without being given a
	// slot, or a Deadline's timer ended the wait (deadline.Fired).
	RejectedWaitTimeout
)

// Unbounded, as the queue capacity given to [Slots.Init], lets any number of
// callers wait.
const Unbounded = math.MaxInt

// Slots is a count of slots held against a limit, with a FIFO queue of
// callers waiting for one. Its zero value is not usable: call [Slots.Init]
// once, first. After Init it is safe for concurrent use.
type Slots struct {
	// active counts slots held, including slots handed to a waiter that has
	// not woken yet. While nobody waits it moves by atomics alone.
	active atomic.Int64
	// queued mirrors waiters.len; it is written under mu and read without.
	queued atomic.Int64
	// limit is the number of slots; it is written under mu (SetLimit) and
	// read without (tryTake).
	limit atomic.Int64

	// mu guards waiters and every hand-off of a slot to a waiter. While
	// anyone waits, every acquire and release goes through it, so slots go
	// to waiters in FIFO order.
	mu      sync.Mutex
	waiters waitList

	queueCap int // waiters allowed; Unbounded is math.MaxInt
	maxWait  time.Duration

	// Owner names the user of these slots in panic messages
	// ("bulkhead: slot released twice"). Set it before use.
	Owner string
}

// Init sets the initial limit (>= 1), the number of callers allowed to wait
// (>= 0, or [Unbounded]) and how long one may wait (0: until its ctx is
// done). The arguments are not checked: the policies validate their Config.
func (s *Slots) Init(limit, queueCap int, maxWait time.Duration) {
	s.limit.Store(int64(limit))
	s.queueCap = queueCap
	s.maxWait = maxWait
	if s.Owner == "" {
		s.Owner = "slots"
	}
}

// Active returns the number of slots held now, including a waiter that has
// been handed a slot and has not yet woken. It may exceed Limit just after
// the limit was lowered.
func (s *Slots) Active() int { return int(s.active.Load()) }

// Queued returns the number of callers waiting for a slot now.
func (s *Slots) Queued() int { return int(s.queued.Load()) }

// Limit returns the current limit.
func (s *Slots) Limit() int { return int(s.limit.Load()) }

// SetLimit changes the limit to n, which must be >= 1. Raising it hands the
// new free slots to the oldest waiters at once; lowering it revokes no slot:
// the calls in flight drain to the new limit, their releases freeing slots
// instead of handing them on until fewer than n are held.
func (s *Slots) SetLimit(n int) {
	s.mu.Lock()
	s.limit.Store(int64(n))
	s.grantLocked()
	s.mu.Unlock()
}

// Acquire takes a slot for one call, waiting if need be. On [Admitted] the
// caller must call Release exactly once; on any other outcome it holds
// nothing. The error is ctx.Err() with [CtxDone], nil otherwise.
func (s *Slots) Acquire(ctx context.Context) (Outcome, error) {
	// Atomic loads for the common contexts: cheap enough to pay every call.
	if ctx.Err() != nil {
		return ended(ctx)
	}
	// Fast path: nobody waits and a slot is free. Once someone waits, every
	// newcomer goes through mu and queues behind them: no queue jumping.
	if s.queued.Load() == 0 && s.tryTake() {
		return Admitted, nil
	}
	s.mu.Lock()
	return s.acquireSlow(ctx)
}

// tryTake takes a free slot, if there is one.
func (s *Slots) tryTake() bool {
	for {
		// The limit is read again on each try: a SetLimit that lands while
		// the swap retries applies to this acquire.
		a := s.active.Load()
		if a >= s.limit.Load() {
			return false
		}
		if s.active.CompareAndSwap(a, a+1) {
			return true
		}
	}
}

// acquireSlow is Acquire's path when every slot seemed taken or someone
// waits. s.mu is held on entry and released before it returns.
func (s *Slots) acquireSlow(ctx context.Context) (Outcome, error) {
	if s.waiters.len == 0 && s.tryTake() {
		s.mu.Unlock()
		return Admitted, nil
	}
	if s.waiters.len >= s.queueCap {
		s.mu.Unlock()
		return RejectedFull, nil
	}
	w := &waiter{ready: make(chan struct{}, 1)}
	s.waiters.pushBack(w)
	s.queued.Store(int64(s.waiters.len))
	// A release on the fast path may have freed a slot between our tryTake
	// and the Store above, having seen queued == 0. Both sides write one
	// atomic and then read the other's (sequentially consistent in Go), so
	// either that release sees queued > 0 and grants under mu, or we see its
	// free slot here and grant it: to the oldest waiter, maybe not us.
	s.grantLocked()
	s.mu.Unlock()
	return s.wait(ctx, w)
}

// wait blocks until w is handed a slot, ctx is done or MaxWait passes.
func (s *Slots) wait(ctx context.Context, w *waiter) (Outcome, error) {
	var expired <-chan time.Time
	if s.maxWait > 0 {
		t := time.NewTimer(s.maxWait)
		defer t.Stop()
		expired = t.C
	}
	done := ctx.Done()
	select {
	case <-w.ready:
	case <-done:
		s.abandon(w)
		return ended(ctx)
	case <-expired:
		if !s.expire(w) {
			return RejectedWaitTimeout, nil
		}
	}
	// We hold a slot. select chooses at random among ready cases, so ctx may
	// have ended too: a caller whose ctx ended while it waited never runs its
	// call, so give the slot back (to the next waiter) as a release would.
	select {
	case <-done:
		s.Release()
		return ended(ctx)
	default:
		return Admitted, nil
	}
}

// ended is the outcome of an Acquire whose ctx is done. When a Deadline's
// timer, not the caller, ended it, the call never ran: it is a rejection
// of this wait, not a timeout.
func ended(ctx context.Context) (Outcome, error) {
	if deadline.Fired(ctx) {
		return RejectedWaitTimeout, nil
	}
	return CtxDone, ctx.Err()
}

// abandon takes w out of the queue after its ctx ended. A release may have
// handed w the slot between ctx ending and abandon taking the mutex: w.granted
// tells, and the mutex makes the answer final. If so, w holds a slot it will
// not use, and passes it on exactly as a release does (to the next waiter,
// or back to the pool), so that no slot is lost and nobody jumps the queue.
// Otherwise w is unlinked in O(1), and no release can reach it afterwards.
func (s *Slots) abandon(w *waiter) {
	s.mu.Lock()
	if w.granted {
		s.handOffLocked()
	} else {
		s.waiters.remove(w)
		s.queued.Store(int64(s.waiters.len))
	}
	s.mu.Unlock()
}

// expire takes w out of the queue after MaxWait passed, and reports whether
// w holds a slot after all. If a release handed w the slot before expire took
// the mutex, w got its slot within MaxWait (the hand-off happened before the
// waiter could act on the timer), so it keeps the slot and runs: rejecting
// it now would waste a slot that was fairly its. Otherwise w is unlinked in
// O(1) and will never be handed a slot.
func (s *Slots) expire(w *waiter) (granted bool) {
	s.mu.Lock()
	granted = w.granted
	if !granted {
		s.waiters.remove(w)
		s.queued.Store(int64(s.waiters.len))
	}
	s.mu.Unlock()
	return granted
}

// Release frees one slot held by the caller: to the oldest waiter, if any
// and the limit allows, else back to the pool. It panics if no slot at all
// is held ("<Owner>: slot released twice"); a second release while other
// calls hold slots cannot be told apart and frees one of theirs.
func (s *Slots) Release() {
	if s.queued.Load() == 0 {
		// Fast path: nobody waits, so the slot goes back to the pool.
		if s.active.Add(-1) < 0 {
			s.active.Add(1)
			panic(s.Owner + ": slot released twice")
		}
		// A caller may have queued between the Load and the Add, having
		// seen no free slot: see acquireSlow. Hand it the slot now.
		if s.queued.Load() != 0 {
			s.mu.Lock()
			s.grantLocked()
			s.mu.Unlock()
		}
		return
	}
	s.mu.Lock()
	if s.active.Load() <= 0 {
		s.mu.Unlock()
		panic(s.Owner + ": slot released twice")
	}
	s.handOffLocked()
	s.mu.Unlock()
}

// handOffLocked gives up one held slot: to the oldest waiter if there is one
// and the limit allows (active is left unchanged, so a caller arriving now
// finds no free slot and cannot jump the queue), otherwise back to the pool.
// While more slots are held than the limit (it was lowered), the slot goes
// back to the pool even if someone waits: the calls in flight drain to the
// limit first, and the waiters keep their order. s.mu must be held.
func (s *Slots) handOffLocked() {
	if s.waiters.len > 0 && s.active.Load() <= s.limit.Load() {
		w := s.waiters.popFront()
		s.queued.Store(int64(s.waiters.len))
		w.granted = true
		w.ready <- struct{}{} // buffered, and sent once: never blocks
		return
	}
	s.active.Add(-1)
}

// grantLocked hands free slots, if any, to the oldest waiters. s.mu must be
// held.
func (s *Slots) grantLocked() {
	for s.waiters.len > 0 && s.tryTake() {
		w := s.waiters.popFront()
		s.queued.Store(int64(s.waiters.len))
		w.granted = true
		w.ready <- struct{}{}
	}
}

package slots

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight/watertight/internal/fielderr"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
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
	// slot, or a Deadline's timer ended the wait (policy.TimedOut).
	RejectedWaitTimeout
	// RejectedShed: the caller waited, and a newcomer took its place in
	// the full queue: one of a higher priority, or of a key with fewer
	// waiters (see [Slots.Acquire]).
	RejectedShed
	// RejectedKeyFull: the caller's key held MaxPerKey slots and the
	// caller could not wait: the queue was full, or MaxQueue 0.
	RejectedKeyFull
)

// Held is what [Slots.Release] needs to free a slot: the key's share the
// slot counts against, if MaxPerKey was set when it was taken. The zero
// Held counts against none; the path that takes no lock returns it.
type Held struct{ share *share }

// Keys are the settings of the fair share by key ([policy.KeyOf]).
type Keys struct {
	// Fair serves the waiters of each class key by key, in turn. Only
	// [Slots.Init] reads it: the policies refuse to change it.
	Fair bool
	// MaxPerKey is the number of slots one key may hold at once; 0 means
	// no cap. It needs Fair: a key at its cap waits in its own line.
	MaxPerKey int
}

// classes is the number of priorities; class c is policy.Priority(c-1).
const classes = 3

func class(ctx context.Context) int { return int(policy.PriorityOf(ctx)) + 1 }

// Unbounded, as the queue capacity given to [Slots.Init] (or any negative
// capacity), lets any number of callers wait: the queue never reaches it,
// and no count overflows.
const Unbounded = math.MaxInt

// Slots is a count of slots held against a limit, with a FIFO queue of
// callers waiting for one. Its zero value is not usable: call [Slots.Init]
// once, first. After Init it is safe for concurrent use.
type Slots struct {
	// active counts slots held, including slots handed to a waiter that has
	// not woken yet. While nobody waits it moves by atomics alone.
	active atomic.Int64
	// queued is the number of waiters; it is written under mu and read
	// without. queuedBy counts them by class, for a status page.
	queued   atomic.Int64
	queuedBy [classes]atomic.Int64
	// lim is the limit and the reserves in force, replaced whole under mu
	// and read without: an admission reads them in one load.
	lim atomic.Pointer[limits]

	// mu guards the queue and every hand-off of a slot to a waiter. While
	// anyone waits, every acquire and release goes through it, so slots go
	// to waiters highest class first, and within a class to its lines in
	// turn, first come first served within a line.
	mu    sync.Mutex
	rings [classes]ring
	// all is the share of every caller without Fair, and of the callers
	// without a key with it. It is never removed.
	all share
	// keys holds, with Fair, the share of each other key that waits or
	// holds a counted slot, and no other: an idle share is removed.
	keys      map[string]*share
	spare     *share // a removed share, for the next key
	fair      bool   // set by Init
	maxPerKey int    // guarded by mu

	// closed[c] is the number of slots class c may not take: the reserves
	// of the classes above it. Guarded by mu.
	closed   [classes]int64
	queueCap int           // waiters allowed; guarded by mu
	maxWait  time.Duration // guarded by mu: a waiter reads it as it queues

	// Owner names the user of these slots in panic messages
	// ("bulkhead: slot released twice"). Set it before use.
	Owner string
}

// limits are a limit and its reserves, as the classes see them.
type limits struct {
	// open[c] is the number of slots class c may take: the limit less the
	// reserves of the classes above it. open[classes-1] is the limit.
	open [classes]int64
	// slow says whether a reserve or a cap per key is set: without, open
	// is the same for every class and nothing counts keys, so an admission
	// need not read its class. capped says MaxPerKey is set: every
	// admission then counts its key under mu.
	slow, capped bool
}

// Init sets the initial limit (>= 1), the number of callers allowed to wait
// ([Unbounded] if negative), how long one may wait (0: until its ctx is done)
// and, by priority, the slots kept for calls of that priority or above (see
// CheckConfig) and the fair share by key. The arguments are not checked:
// the policies validate their Config.
func (s *Slots) Init(limit, queueCap int, maxWait time.Duration, reserve map[policy.Priority]int, keys Keys) {
	s.all.init("")
	if s.fair = keys.Fair; s.fair {
		s.keys = map[string]*share{}
	}
	s.Set(limit, queueCap, maxWait, reserve, keys)
}

// Set changes every setting Init sets, at once: an admission sees the old
// settings or the new. A limit of 0 keeps the limit. A raised limit hands
// its new free slots to the waiters at once; a lowered one revokes no
// slot (see SetLimit). Callers already waiting keep their place and their
// wait: a smaller queue turns newcomers away until it is below its new
// size (but for one that sheds a waiter of a lower class, as in a full
// queue), and a new wait applies to the callers who queue after it.
// keys.Fair is ignored. A new MaxPerKey counts the slots a key holds
// under a cap, the old one's included: a key's slots taken without a cap
// do not count against a cap set later.
func (s *Slots) Set(limit, queueCap int, maxWait time.Duration, reserve map[policy.Priority]int, keys Keys) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxPerKey = keys.MaxPerKey
	s.queueCap = queueCap
	if queueCap < 0 {
		s.queueCap = Unbounded
	}
	s.maxWait = maxWait
	s.closed = [classes]int64{}
	for p, n := range reserve {
		for c := range int(p) + 1 {
			s.closed[c] += int64(n)
		}
	}
	if limit <= 0 {
		limit = s.Limit()
	}
	s.setLimitLocked(limit)
}

// Active returns the number of slots held now, including a waiter that has
// been handed a slot and has not yet woken. It may exceed Limit just after
// the limit was lowered.
func (s *Slots) Active() int { return int(s.active.Load()) }

// Closed returns the slots a call with ctx's priority may not take: the
// reserves of the priorities above it.
func (s *Slots) Closed(ctx context.Context) int {
	l := s.lim.Load()
	return int(l.open[classes-1] - l.open[class(ctx)])
}

// Queued returns the number of callers waiting for a slot now.
func (s *Slots) Queued() int { return int(s.queued.Load()) }

// QueuedBy returns the number of callers of priority p waiting now. It
// takes no lock.
func (s *Slots) QueuedBy(p policy.Priority) int {
	if c := int(p) + 1; c >= 0 && c < classes {
		return int(s.queuedBy[c].Load())
	}
	return 0
}

// Limit returns the current limit.
func (s *Slots) Limit() int { return int(s.lim.Load().open[classes-1]) }

// SetLimit changes the limit to n, which must be >= 1. Raising it hands the
// new free slots to the waiters at once, as releases would; lowering it
// revokes no slot: the calls in flight drain to the new limit, their
// releases freeing slots instead of handing them on until fewer than n are
// held.
func (s *Slots) SetLimit(n int) {
	s.mu.Lock()
	s.setLimitLocked(n)
	s.mu.Unlock()
}

// setLimitLocked sets the limit to n and grants the slots it frees.
// s.mu must be held.
func (s *Slots) setLimitLocked(n int) {
	l := &limits{capped: s.maxPerKey > 0}
	l.slow = s.closed[0] > 0 || l.capped
	for c := range classes {
		l.open[c] = int64(n) - s.closed[c]
	}
	s.lim.Store(l)
	s.grantLocked()
}

// Acquire takes a slot for one call, waiting if need be. On [Admitted] the
// caller must call Release exactly once, with the Held returned; on any
// other outcome it holds nothing. The error is ctx.Err() with [CtxDone],
// nil otherwise.
//
// With Fair, a caller that finds the queue full takes the place of the
// newest waiter of the key with the most waiters in the lowest class
// below its own that has waiters; failing that, of the key with the most
// waiters in its own class, if that key has more waiters than the
// caller's key would have with the caller. Of keys with as many waiters,
// the one whose turn comes last loses a waiter. Otherwise the caller is
// rejected. Without Fair every caller has the same key, and only a higher
// class sheds.
func (s *Slots) Acquire(ctx context.Context) (Outcome, Held, error) {
	// Atomic loads for the common contexts: cheap enough to pay every call.
	if ctx.Err() != nil {
		return ended(ctx)
	}
	// Fast path: nobody waits and a slot is free. Once someone waits, every
	// newcomer goes through mu: no queue jumping.
	if s.queued.Load() == 0 && s.tryTake(ctx, -1) {
		return Admitted, Held{}, nil
	}
	return s.acquireSlow(ctx, class(ctx))
}

// tryTake takes a slot that class c may take, if one is free. c < 0 means
// ctx's class, read only if reserves are set: without them, the class
// matters only in the queue. c < 0 with MaxPerKey set takes nothing: the
// key must be counted under mu.
func (s *Slots) tryTake(ctx context.Context, c int) bool {
	for {
		// The limits are read again on each try: a SetLimit that lands
		// while the swap retries applies to this acquire.
		l := s.lim.Load()
		k := classes - 1
		if l.slow {
			if c < 0 && l.capped {
				return false
			}
			if c < 0 {
				c = class(ctx)
			}
			k = c
		}
		a := s.active.Load()
		if a >= l.open[k] {
			return false
		}
		if s.active.CompareAndSwap(a, a+1) {
			return true
		}
	}
}

// acquireSlow is Acquire's path, for class c, when every slot seemed taken,
// someone waits or keys are counted.
func (s *Slots) acquireSlow(ctx context.Context, c int) (Outcome, Held, error) {
	key := ""
	if s.fair {
		key = policy.KeyOf(ctx) // outside mu: a ctx's values are a chain
	}
	s.mu.Lock()
	sh := s.share(key)
	if s.next(c) == nil && !s.atCap(sh) && s.tryTake(ctx, c) {
		h := s.count(key)
		s.mu.Unlock()
		return Admitted, h, nil
	}
	// An empty queue has nobody to shed: MaxQueue 0 rejects at once.
	if q := int(s.queued.Load()); q >= s.queueCap && (q == 0 || !s.shed(c, sh)) {
		o := RejectedFull
		if s.atCap(sh) {
			o = RejectedKeyFull
		}
		s.mu.Unlock()
		return o, Held{}, nil
	}
	// Again: shedding the key's last waiter, of a lower class, removed it.
	sh = s.shareFor(key)
	w := &waiter{ready: make(chan struct{}, 1), line: &sh.lines[c]}
	s.push(w)
	// A release on the fast path may have freed a slot between our tryTake
	// and the Store above, having seen queued == 0. Both sides write one
	// atomic and then read the other's (sequentially consistent in Go), so
	// either that release sees queued > 0 and grants under mu, or we see its
	// free slot here and grant it: to the oldest waiter, maybe not us.
	s.grantLocked()
	maxWait := s.maxWait
	s.mu.Unlock()
	return s.wait(ctx, w, maxWait)
}

// wait blocks until w is handed a slot, ctx is done or maxWait passes.
func (s *Slots) wait(ctx context.Context, w *waiter, maxWait time.Duration) (Outcome, Held, error) {
	var expired <-chan time.Time
	if maxWait > 0 {
		t := time.NewTimer(maxWait)
		defer t.Stop()
		expired = t.C
	}
	done := ctx.Done()
	select {
	case <-w.ready:
		if w.shed {
			return RejectedShed, Held{}, nil
		}
	case <-done:
		s.abandon(w)
		return ended(ctx)
	case <-expired:
		if o := s.expire(w); o != Admitted {
			return o, Held{}, nil
		}
	}
	// We hold a slot. select chooses at random among ready cases, so ctx may
	// have ended too: a caller whose ctx ended while it waited never runs its
	// call, so give the slot back (to the next waiter) as a release would.
	h := w.held() // set before ready was sent, or read by expire under mu
	select {
	case <-done:
		s.Release(h)
		return ended(ctx)
	default:
		return Admitted, h, nil
	}
}

// ended is the outcome of an Acquire whose ctx is done. When a Deadline's
// timer, not the caller, ended it, the call never ran: it is a rejection
// of this wait, not a timeout; unless a retry's earlier attempt ran fn,
// and the call is the Deadline's timeout.
func ended(ctx context.Context) (Outcome, Held, error) {
	if stage.WaitRefused(ctx) {
		return RejectedWaitTimeout, Held{}, nil
	}
	return CtxDone, Held{}, ctx.Err()
}

// abandon takes w out of the queue after its ctx ended. If a release
// handed w the slot first (w.granted, final under the mutex), w passes it
// on as a release does, so that no slot is lost and nobody jumps the
// queue. Otherwise w is unlinked in O(1), out of every release's reach.
func (s *Slots) abandon(w *waiter) {
	s.mu.Lock()
	if w.granted {
		s.releaseLocked(w.held())
	} else if !w.shed {
		s.unlink(w)
	}
	s.mu.Unlock()
}

// expire takes w out of the queue after MaxWait passed, and returns its
// outcome. A w handed the slot before expire took the mutex got it within
// MaxWait, fairly: it keeps it and runs. A w shed first is shed. Otherwise
// w is unlinked in O(1).
func (s *Slots) expire(w *waiter) Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case w.granted:
		return Admitted
	case w.shed:
		return RejectedShed
	}
	s.unlink(w)
	return RejectedWaitTimeout
}

// push queues w in its line; a line that had no waiter takes the last
// turn of its class. s.mu must be held.
func (s *Slots) push(w *waiter) {
	l := w.line
	l.pushBack(w)
	if l.len == 1 {
		s.rings[l.class].pushBack(l)
	}
	s.queued.Add(1)
	s.queuedBy[l.class].Add(1)
}

// unlink takes w, which waits, out of its line; a line left empty leaves
// its ring, and a share left idle is removed. s.mu must be held.
func (s *Slots) unlink(w *waiter) {
	l := w.line
	c := l.class // read first: prune zeroes an idle share, its lines' class too
	l.remove(w)
	s.queued.Add(-1)
	s.queuedBy[c].Add(-1)
	if l.len == 0 {
		s.rings[c].remove(l)
		s.prune(l.share)
	}
}

// next returns the line whose turn it is among classes c and above: in
// the highest class that has one, the first line of its ring whose key is
// not at its cap. It returns nil if there is none. The lines it passes
// over are of keys at their cap, at most the limit over MaxPerKey per
// class. s.mu must be held.
func (s *Slots) next(c int) *line {
	for k := classes - 1; k >= c; k-- {
		for l := s.rings[k].head; l != nil; l = l.next {
			if !s.atCap(l.share) {
				return l
			}
		}
	}
	return nil
}

// shed makes room in the full queue for a caller of class c whose key's
// share is sh (nil: a key with no state), as Acquire says. It reports
// whether it shed a waiter. s.mu must be held.
func (s *Slots) shed(c int, sh *share) bool {
	for low := range c {
		if l := s.rings[low].longest(); l != nil {
			s.drop(l.tail)
			return true
		}
	}
	n := 1 // the caller's key's waiters in class c, with the caller
	if sh != nil {
		n += sh.lines[c].len
	}
	if l := s.rings[c].longest(); l != nil && l.len > n {
		s.drop(l.tail)
		return true
	}
	return false
}

// drop takes w out of the queue, shed. s.mu must be held.
func (s *Slots) drop(w *waiter) {
	s.unlink(w)
	w.shed = true
	w.ready <- struct{}{} // buffered, and sent once: never blocks
}

// wake hands a slot to the first waiter of l, whose turn it is; l then
// goes to the back of its ring. s.mu must be held.
func (s *Slots) wake(l *line) {
	w := l.head
	if l.len > 1 && l.next != nil {
		r := &s.rings[l.class]
		r.remove(l)
		r.pushBack(l)
	}
	if s.maxPerKey > 0 {
		l.share.held++ // before unlink, which would remove an idle share
		w.counted = true
	}
	w.granted = true
	s.unlink(w)
	w.ready <- struct{}{} // buffered, and sent once: never blocks
}

// Release frees one slot held by the caller, as handOffLocked says; h is
// the Held its Acquire returned. It panics if no slot at all is held
// ("<Owner>: slot released twice"); a second release while other calls
// hold slots cannot be told apart and frees one of theirs.
func (s *Slots) Release(h Held) {
	if h.share == nil && s.queued.Load() == 0 {
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
	if s.active.Load() <= 0 || (h.share != nil && h.share.held <= 0) {
		s.mu.Unlock()
		panic(s.Owner + ": slot released twice")
	}
	s.releaseLocked(h)
	s.mu.Unlock()
}

// releaseLocked gives up one held slot, uncounting it from its key's
// share, and hands it off. s.mu must be held.
func (s *Slots) releaseLocked(h Held) {
	if sh := h.share; sh != nil {
		sh.held--
		s.prune(sh)
	}
	s.handOffLocked()
}

// handOffLocked gives up one held slot: to the waiter whose turn it is
// (see next), if its class may take the slot (active is left unchanged,
// so a caller arriving now finds no free slot and cannot jump the queue),
// otherwise back to the pool. While more slots are held than the limit
// (it was lowered), the slot goes back to the pool even if someone waits:
// the calls in flight drain to the limit first. A lower class may take no
// slot the highest class waiting may not. s.mu must be held.
func (s *Slots) handOffLocked() {
	if l := s.next(0); l != nil && s.active.Load() <= s.lim.Load().open[l.class] {
		s.wake(l)
		return
	}
	s.active.Add(-1)
}

// grantLocked hands free slots, if any, to the waiters, highest class
// first. s.mu must be held.
func (s *Slots) grantLocked() {
	for l := s.next(0); l != nil && s.tryTake(nil, l.class); l = s.next(0) {
		s.wake(l)
	}
}

// CheckConfig returns an error naming the first invalid field of pkg's
// Config, whose MaxQueue must be >= 0 or -1 (Unbounded), MaxWait >= 0 and
// Reserve valid for a limit of limit.
func CheckConfig(pkg string, maxQueue int, maxWait time.Duration, reserve map[policy.Priority]int, limit int) error {
	if maxQueue < -1 {
		return fielderr.New(pkg, "MaxQueue", "must be >= 0 or Unbounded (-1), got %d", maxQueue)
	}
	if maxWait < 0 {
		return fielderr.New(pkg, "MaxWait", "must be >= 0, got %v", maxWait)
	}
	return checkReserve(pkg, reserve, limit)
}

// checkReserve returns an error naming pkg's Config.Reserve if r is not a
// valid reserve for a limit of limit. The keys are checked in order, so
// the error is the same from run to run.
func checkReserve(pkg string, r map[policy.Priority]int, limit int) error {
	sum := 0 // < limit: the check below never overflows
	for _, p := range slices.Sorted(maps.Keys(r)) {
		n, field := r[p], fmt.Sprintf("Reserve[%v]", p)
		switch {
		case p != policy.PriorityDefault && p != policy.PriorityCritical:
			return fielderr.New(pkg, field, "must not be set: only the default and critical priorities may reserve slots")
		case n < 0:
			return fielderr.New(pkg, field, "must be >= 0, got %d", n)
		case n >= limit-sum:
			return fielderr.New(pkg, field, "= %d leaves no slot of %d open to every call (%d reserved by the others)", n, limit, sum)
		}
		sum += n
	}
	return nil
}

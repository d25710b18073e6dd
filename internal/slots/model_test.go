package slots

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/watertight/watertight/policy"
)

// TestModel checks Slots against a model under random steps: acquires (each
// in its own goroutine, holding its slot until told to release), releases,
// cancellations of waiting and holding callers, the passing of time (MaxWait
// and ctx deadlines), a release racing a waiter's cancellation, and
// SetLimit up and down, with callers of the three priorities and slots
// reserved for the higher ones, and of three keys (one of them no key),
// with or without a fair share and a cap per key. Each rapid case runs in its own synctest
// bubble, so the state after each step is exact and time is fake.
//
// After every step: Active and Queued equal the model's; no caller waits
// while its class may take a free slot; every caller was admitted with
// fewer slots held than its class may take (the limit less the reserves
// above it: checked by the caller itself, at admission); every caller
// ended exactly once, with the outcome the model says. The model's rules:
// a slot goes to the first waiter of the key whose turn it is in the
// highest class waiting, if that class may take it, keys at their cap
// passed over; a caller finding the queue full takes the place of the
// newest waiter of the longest key of the lowest class below its own, or
// of its own class if that key is longer than the caller's would be;
// SetLimit up grants at once. Without a fair share every caller has the
// same key. The keys tracked are those waiting or holding a counted slot.
func TestModel(t *testing.T) {
	rounds := 10
	if testing.Short() {
		rounds = 3
	}
	for range rounds {
		rapid.Check(t, func(rt *rapid.T) {
			rapid.SyncTest(rt, func(rt *rapid.T) {
				m := newModel(rt)
				rt.Repeat(map[string]func(*rapid.T){
					"acquire":  m.acquire,
					"release":  m.release,
					"cancel":   m.cancel,
					"race":     m.race,
					"sleep":    m.sleep,
					"setLimit": m.setLimit,
					"":         m.check,
				})
			})
		})
	}
}

type modelCaller struct {
	id       int
	class    int
	key      string // as the slots see it: "" without a fair share
	ctx      context.Context
	cancel   context.CancelFunc
	release  chan struct{}
	done     chan struct{}
	admitted atomic.Bool
	outcome  Outcome
	held     Held
	err      error
	checked  bool
}

type modelWaiter struct {
	id       int
	class    int
	key      string
	expireAt time.Time // zero: no MaxWait
	deadline time.Time // zero: none
}

type modelResult struct {
	o   Outcome
	err error
}

type model struct {
	s        *Slots
	limit    int
	queueCap int
	maxWait  time.Duration
	closed   [classes]int
	keys     Keys

	callers []*modelCaller
	// turns lists, by class, the keys with waiters in the order of their
	// turns.
	turns   [classes][]string
	holders []int
	queue   []modelWaiter
	want    map[int]modelResult

	held     atomic.Int64 // slots held, as the callers count them
	overflow atomic.Int64 // admissions with held > Limit()
}

func newModel(rt *rapid.T) *model {
	m := &model{
		limit:    rapid.IntRange(1, 4).Draw(rt, "limit"),
		queueCap: rapid.SampledFrom([]int{0, 1, 3, Unbounded}).Draw(rt, "queueCap"),
		maxWait:  time.Duration(rapid.SampledFrom([]int{0, 10, 30}).Draw(rt, "maxWaitMs")) * time.Millisecond,
		want:     map[int]modelResult{},
	}
	m.s = &Slots{Owner: "model"}
	reserve := map[policy.Priority]int{
		policy.PriorityDefault:  rapid.IntRange(0, 1).Draw(rt, "reserveDefault"),
		policy.PriorityCritical: rapid.IntRange(0, 2).Draw(rt, "reserveCritical"),
	}
	for p, n := range reserve {
		for c := range int(p) + 1 {
			m.closed[c] += n
		}
	}
	if m.keys.Fair = rapid.Bool().Draw(rt, "fair"); m.keys.Fair {
		m.keys.MaxPerKey = rapid.IntRange(0, 2).Draw(rt, "maxPerKey")
	}
	m.s.Init(m.limit, m.queueCap, m.maxWait, reserve, m.keys)
	rt.Cleanup(func() {
		for _, c := range m.callers {
			c.cancel()
		}
		synctest.Wait()
		for _, c := range m.callers {
			select {
			case <-c.release:
			default:
				close(c.release)
			}
		}
		for _, c := range m.callers {
			<-c.done
		}
	})
	return m
}

func (m *model) acquire(rt *rapid.T) {
	c := &modelCaller{id: len(m.callers), release: make(chan struct{}), done: make(chan struct{})}
	c.class = rapid.IntRange(0, classes-1).Draw(rt, "class")
	var deadline time.Time
	switch rapid.IntRange(0, 3).Draw(rt, "ctx") {
	case 0, 1:
		c.ctx, c.cancel = context.WithCancel(context.Background())
	case 2:
		// 5 ms off the multiples of 10 ms of MaxWait and sleeps.
		deadline = time.Now().Add(time.Duration(5+10*rapid.IntRange(0, 3).Draw(rt, "deadlineSteps")) * time.Millisecond)
		c.ctx, c.cancel = context.WithDeadline(context.Background(), deadline)
	case 3:
		c.ctx, c.cancel = context.WithCancel(context.Background())
		c.cancel()
	}
	c.ctx = policy.WithPriority(c.ctx, policy.Priority(c.class-1))
	if k := rapid.SampledFrom([]string{"", "a", "b"}).Draw(rt, "key"); k != "" {
		c.ctx = policy.WithKey(c.ctx, k)
		if m.keys.Fair {
			c.key = k
		}
	}
	m.callers = append(m.callers, c)
	go func() {
		defer close(c.done)
		c.outcome, c.held, c.err = m.s.Acquire(c.ctx)
		if c.outcome != Admitted {
			return
		}
		if n := m.held.Add(1); n > int64(m.s.Limit()-m.closed[c.class]) {
			m.overflow.Add(1)
		}
		c.admitted.Store(true)
		<-c.release
		m.held.Add(-1)
		m.s.Release(c.held)
	}()
	synctest.Wait()
	switch {
	case c.ctx.Err() != nil:
		m.want[c.id] = modelResult{CtxDone, c.ctx.Err()}
	case m.mayTake(c.class, c.key):
		m.holders = append(m.holders, c.id)
	case m.queueCap == Unbounded || len(m.queue) < m.queueCap || m.shed(c.class, c.key):
		w := modelWaiter{id: c.id, class: c.class, key: c.key, deadline: deadline}
		if m.maxWait > 0 {
			w.expireAt = time.Now().Add(m.maxWait)
		}
		m.join(w)
		m.grant()
	case m.atCap(c.key):
		m.want[c.id] = modelResult{RejectedKeyFull, nil}
	default:
		m.want[c.id] = modelResult{RejectedFull, nil}
	}
}

// ceiling is the number of slots class c may fill.
func (m *model) ceiling(c int) int { return m.limit - m.closed[c] }

// mayTake reports whether a caller of class c and key k takes a slot at
// once: no waiter of its class or above may take one, its key is below
// its cap and its class may fill a slot.
func (m *model) mayTake(c int, k string) bool {
	_, _, waiting := m.next(c)
	return !waiting && !m.atCap(k) && len(m.holders) < m.ceiling(c)
}

// atCap reports whether key k holds its cap of slots.
func (m *model) atCap(k string) bool {
	if m.keys.MaxPerKey == 0 {
		return false
	}
	n := 0
	for _, id := range m.holders {
		if m.callers[id].key == k {
			n++
		}
	}
	return n >= m.keys.MaxPerKey
}

// next returns the class and key whose turn it is among classes c and
// above: in the highest class that has one, the first key in turn not at
// its cap.
func (m *model) next(c int) (int, string, bool) {
	for cl := classes - 1; cl >= c; cl-- {
		for _, k := range m.turns[cl] {
			if !m.atCap(k) {
				return cl, k, true
			}
		}
	}
	return 0, "", false
}

// waiting is the number of waiters of class c and key k.
func (m *model) waiting(c int, k string) int {
	n := 0
	for _, w := range m.queue {
		if w.class == c && w.key == k {
			n++
		}
	}
	return n
}

// first is the index in m.queue of the first waiter of class c and key k.
func (m *model) first(c int, k string) int {
	return slices.IndexFunc(m.queue, func(w modelWaiter) bool { return w.class == c && w.key == k })
}

// join queues w; a key with no waiter of its class takes the last turn.
func (m *model) join(w modelWaiter) {
	if m.waiting(w.class, w.key) == 0 {
		m.turns[w.class] = append(m.turns[w.class], w.key)
	}
	m.queue = append(m.queue, w)
}

// leave takes m.queue[i] out; a key left with no waiter of its class
// leaves the turns.
func (m *model) leave(i int) {
	w := m.queue[i]
	m.queue = slices.Delete(m.queue, i, i+1)
	if m.waiting(w.class, w.key) == 0 {
		m.turns[w.class] = slices.DeleteFunc(m.turns[w.class], func(k string) bool { return k == w.key })
	}
}

// longest returns the key with the most waiters of class c, the last in
// turn of those as long, and its waiters.
func (m *model) longest(c int) (string, int) {
	key, n := "", 0
	for _, k := range m.turns[c] {
		if w := m.waiting(c, k); w >= n {
			key, n = k, w
		}
	}
	return key, n
}

// shed drops the newest waiter of the longest key of the lowest class
// below c that has waiters, or of class c if that key has more waiters
// than k would have with the caller.
func (m *model) shed(c int, k string) bool {
	for low := range c {
		if key, n := m.longest(low); n > 0 {
			m.dropNewest(low, key)
			return true
		}
	}
	if key, n := m.longest(c); n > 1+m.waiting(c, k) {
		m.dropNewest(c, key)
		return true
	}
	return false
}

// dropNewest sheds the newest waiter of class c and key k.
func (m *model) dropNewest(c int, k string) {
	for i := len(m.queue) - 1; i >= 0; i-- {
		if w := m.queue[i]; w.class == c && w.key == k {
			m.want[w.id] = modelResult{RejectedShed, nil}
			m.leave(i)
			return
		}
	}
}

// grant hands free slots to the waiters whose turn it is, as the model's
// limit, reserves and cap allow; a key served goes to the back of the
// turns of its class.
func (m *model) grant() {
	for {
		c, k, ok := m.next(0)
		if !ok || len(m.holders) >= m.ceiling(c) {
			return
		}
		t := slices.DeleteFunc(m.turns[c], func(x string) bool { return x == k })
		m.turns[c] = append(t, k)
		i := m.first(c, k)
		m.holders = append(m.holders, m.queue[i].id)
		m.leave(i)
	}
}

func (m *model) dropHolder(id int) {
	m.holders = slices.DeleteFunc(m.holders, func(h int) bool { return h == id })
	m.want[id] = modelResult{Admitted, nil}
}

func (m *model) release(rt *rapid.T) {
	if len(m.holders) == 0 {
		rt.Skip("no holder")
	}
	id := rapid.SampledFrom(m.holders).Draw(rt, "holder")
	close(m.callers[id].release)
	synctest.Wait()
	m.dropHolder(id)
	m.grant()
}

func (m *model) cancel(rt *rapid.T) {
	ids := append([]int(nil), m.holders...)
	for _, w := range m.queue {
		ids = append(ids, w.id)
	}
	if len(ids) == 0 {
		rt.Skip("nobody to cancel")
	}
	id := rapid.SampledFrom(ids).Draw(rt, "cancel")
	c := m.callers[id]
	c.cancel()
	synctest.Wait()
	if i := slices.IndexFunc(m.queue, func(w modelWaiter) bool { return w.id == id }); i >= 0 && c.ctx.Err() == context.Canceled {
		m.leave(i)
		m.want[id] = modelResult{CtxDone, context.Canceled}
	}
}

// race cancels the next waiter to be served and, at the same moment, ends
// a holder. If the limit lets the slot be handed on, the waiter may get it
// and keep it, or give up and pass it on; else it just leaves. A waiter
// handed the slot moves its key to the back of the turns, one that left
// first does not: so the waiter raced is the only one of its key and
// class, or its class has one key.
func (m *model) race(rt *rapid.T) {
	if len(m.holders) == 0 || len(m.queue) == 0 {
		rt.Skip("need a holder and a waiter")
	}
	cl, k, ok := m.next(0)
	if !ok || (m.waiting(cl, k) > 1 && len(m.turns[cl]) > 1) {
		rt.Skip("need a waiter whose turn it is, alone in its key or class")
	}
	id := rapid.SampledFrom(m.holders).Draw(rt, "holder")
	i := m.first(cl, k)
	h, w := m.callers[id], m.callers[m.queue[i].id]
	cancelFirst := rapid.Bool().Draw(rt, "cancelFirst")
	if cancelFirst {
		w.cancel()
	}
	close(h.release)
	if !cancelFirst {
		w.cancel()
	}
	synctest.Wait()
	m.dropHolder(id)
	m.leave(i)
	if len(m.holders) < m.ceiling(w.class) && w.admitted.Load() {
		m.holders = append(m.holders, w.id)
		return
	}
	m.want[w.id] = modelResult{CtxDone, context.Canceled}
	m.grant()
}

func (m *model) sleep(rt *rapid.T) {
	time.Sleep(time.Duration(10*rapid.IntRange(1, 4).Draw(rt, "sleep10ms")) * time.Millisecond)
	synctest.Wait()
	now := time.Now()
	for i := len(m.queue) - 1; i >= 0; i-- {
		w := m.queue[i]
		byWait := !w.expireAt.IsZero() && !now.Before(w.expireAt)
		byCtx := !w.deadline.IsZero() && !now.Before(w.deadline)
		switch {
		case byWait && (!byCtx || w.expireAt.Before(w.deadline)):
			m.want[w.id] = modelResult{RejectedWaitTimeout, nil}
		case byCtx:
			m.want[w.id] = modelResult{CtxDone, context.DeadlineExceeded}
		default:
			continue
		}
		m.leave(i)
	}
}

func (m *model) setLimit(rt *rapid.T) {
	n := rapid.IntRange(1, 5).Draw(rt, "newLimit")
	m.s.SetLimit(n)
	synctest.Wait()
	m.limit = n
	m.grant()
}

func (m *model) check(rt *rapid.T) {
	if a, q := m.s.Active(), m.s.Queued(); a != len(m.holders) || q != len(m.queue) {
		rt.Fatalf("Active, Queued = %d, %d; model %d, %d (holders %v, queue %v, limit %d)", a, q, len(m.holders), len(m.queue), m.holders, m.queue, m.limit)
	}
	if m.s.Limit() != m.limit {
		rt.Fatalf("Limit() = %d; model %d", m.s.Limit(), m.limit)
	}
	if c, k, ok := m.next(0); ok && len(m.holders) < m.ceiling(c) {
		rt.Fatalf("key %q of class %d waits with %d slots held, of the %d it may take", k, c, len(m.holders), m.ceiling(c))
	}
	m.checkQueuedBy(rt)
	if got, want := m.s.KeysTracked(), m.tracked(); got != want {
		rt.Fatalf("KeysTracked = %d; model %d", got, want)
	}
	if n := m.overflow.Load(); n != 0 {
		rt.Fatalf("%d admissions above the limit", n)
	}
	if n := m.held.Load(); n < 0 || int(n) != len(m.holders) {
		rt.Fatalf("callers hold %d slots; model %d", n, len(m.holders))
	}
	for _, c := range m.callers {
		holding := slices.Contains(m.holders, c.id)
		want, ended := m.want[c.id]
		if c.admitted.Load() != (holding || (ended && want.o == Admitted)) {
			rt.Fatalf("caller %d: admitted %v; model holding %v, ended %v (%v)", c.id, c.admitted.Load(), holding, ended, want)
		}
		isDone := false
		select {
		case <-c.done:
			isDone = true
		default:
		}
		if isDone != ended {
			rt.Fatalf("caller %d: ended %v; model %v", c.id, isDone, ended)
		}
		if !ended || c.checked {
			continue
		}
		c.checked = true
		if c.outcome != want.o || c.err != want.err {
			rt.Fatalf("caller %d: Acquire = %v, %v; model %v, %v", c.id, c.outcome, c.err, want.o, want.err)
		}
	}
}

// checkQueuedBy fails unless QueuedBy counts the model's waiters of
// each class.
func (m *model) checkQueuedBy(rt *rapid.T) {
	var byClass [classes]int
	for _, w := range m.queue {
		byClass[w.class]++
	}
	for c, n := range byClass {
		if got := m.s.QueuedBy(policy.Priority(c - 1)); got != n {
			rt.Fatalf("QueuedBy(%v) = %d; model %d", policy.Priority(c-1), got, n)
		}
	}
}

// tracked is the number of keys (but "") that wait or hold a counted slot.
func (m *model) tracked() int {
	keys := map[string]bool{}
	for _, w := range m.queue {
		keys[w.key] = true
	}
	if m.keys.MaxPerKey > 0 {
		for _, id := range m.holders {
			keys[m.callers[id].key] = true
		}
	}
	delete(keys, "")
	return len(keys)
}

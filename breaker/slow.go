package breaker

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/watertight/watertight/internal/stage"
)

// slowWatch times the calls of a Breaker with a slow rule. A call turns
// slow once it has run for d without an answer. One timer, armed for the
// oldest call still timed, judges calls the moment they pass d, so a call
// that never ends is judged all the same.
type slowWatch struct {
	b     *Breaker
	d     time.Duration
	ratio float64
	min   uint32
	base  time.Time // starts are ns since base

	mu      sync.Mutex
	buf     []timedCall          // the calls timed are buf[first:], in admission order
	first   int                  // buf is reused once empty
	head    uint64               // seq of buf[first]; seqs start at 1
	running map[uint64]timedCall // judged slow, not ended: at most the calls in flight
	timer   *time.Timer
	armed   bool          // timer will fire, at at
	at      time.Duration // ns since base
}

// timedCall is one call a slowWatch times.
type timedCall struct {
	start int64 // ns since base
	m     *machine
	over  bool // ended or answered: no longer timed
}

// slowCounts are a closed machine's slow calls, in the buckets of its
// window, by the age of their admission as gobreaker counts outcomes.
// They are guarded by the slowWatch's mu.
type slowCounts struct {
	born   int64 // ns since the slowWatch's base
	period int64
	age    uint64   // the newest bucket
	slow   []uint32 // calls judged slow
	open   []uint32 // of those, the ones not (yet) counted as a success or failure
	total  uint32   // the sum of slow
}

func newSlowCounts(born time.Duration, period time.Duration, n int) *slowCounts {
	return &slowCounts{born: int64(born), period: int64(period), slow: make([]uint32, n), open: make([]uint32, n)}
}

// ageAt returns the window bucket of t, in ns since the slowWatch's base.
func (c *slowCounts) ageAt(t int64) uint64 {
	return uint64(max(t-c.born, 0) / c.period)
}

// roll brings the window up to age: buckets older than the window are
// emptied.
func (c *slowCounts) roll(age uint64) {
	for n := uint64(len(c.slow)); c.age < age; {
		c.age++
		c.total -= c.slow[c.age%n]
		c.slow[c.age%n], c.open[c.age%n] = 0, 0
		if age-c.age >= n { // the whole window has passed
			clear(c.slow)
			clear(c.open)
			c.age, c.total = age, 0
		}
	}
}

// nextRoll returns when, in ns since the slowWatch's base, the window
// after now rolls.
func (c *slowCounts) nextRoll(now time.Duration) time.Duration {
	return time.Duration(c.born + int64(c.ageAt(int64(now))+1)*c.period)
}

// add adds ds and do to the bucket of age, if it is in the window.
func (c *slowCounts) add(age uint64, ds, do int) {
	n := uint64(len(c.slow))
	if age > c.age || c.age-age >= n {
		return
	}
	c.slow[age%n] = uint32(int(c.slow[age%n]) + ds)
	c.open[age%n] = uint32(int(c.open[age%n]) + do)
	c.total = uint32(int(c.total) + ds)
}

// sums returns the slow calls and the open ones in the window.
func (c *slowCounts) sums() (slow, open uint32) {
	for i := range c.slow {
		slow += c.slow[i]
		open += c.open[i]
	}
	return slow, open
}

// calls returns the calls timed, from seq head. w.mu must be held.
func (w *slowWatch) calls() []timedCall { return w.buf[w.first:] }

// admit starts timing a call m admitted, and returns its seq.
func (w *slowWatch) admit(m *machine) uint64 {
	now := time.Since(w.base)
	w.mu.Lock()
	w.buf = append(w.buf, timedCall{start: int64(now), m: m})
	seq := w.head + uint64(len(w.buf)-w.first) - 1
	if !w.armed || now+w.d < w.at {
		w.arm(now, now+w.d)
	}
	w.mu.Unlock()
	return seq
}

// arm sets the timer to fire at at. w.mu must be held.
func (w *slowWatch) arm(now, at time.Duration) {
	wait := at - now
	w.at = at
	if w.timer == nil {
		w.timer = time.AfterFunc(wait, w.judge)
	} else {
		w.timer.Reset(wait)
	}
	w.armed = true
}

// end stops timing call seq, ended with an outcome counted as a success or
// a failure if counted, and reports the outcome to gobreaker with report,
// under w.mu: no judgment sees the outcome counted and the call still open.
// While the current machine's window holds slow calls, an ending call may
// bring the calls to SlowCallMinCalls: the rule is judged again.
func (w *slowWatch) end(seq uint64, counted bool, report func()) {
	if m := w.ended(seq, counted, report); m != nil {
		w.b.tripSlow(m)
	}
}

// ended is end's part under w.mu. It returns the machine to trip, or nil.
func (w *slowWatch) ended(seq uint64, counted bool, report func()) *machine {
	w.mu.Lock()
	defer w.mu.Unlock()
	report()
	if seq >= w.head { // not judged
		w.over(seq)
	} else if c, ok := w.running[seq]; ok { // judged slow
		delete(w.running, seq)
		if s := c.m.slow; s != nil && counted {
			s.add(s.ageAt(c.start), 0, -1)
		}
	}
	if m := w.b.cb.Load(); counted && m.slow != nil && m.slow.total > 0 && w.trips(m, time.Since(w.base)) {
		return m
	}
	return nil
}

// answer stops timing call seq: its answer came.
func (w *slowWatch) answer(seq uint64) {
	w.mu.Lock()
	w.over(seq)
	w.mu.Unlock()
}

// over marks call seq no longer timed, and drops the calls at the head
// that are not. w.mu must be held.
func (w *slowWatch) over(seq uint64) {
	calls := w.calls()
	if seq < w.head || seq-w.head >= uint64(len(calls)) {
		return // judged slow, or already over
	}
	calls[seq-w.head].over = true
	n := 0
	for n < len(calls) && calls[n].over {
		n++
	}
	w.drop(n)
}

// drop drops the first n calls. w.mu must be held.
func (w *slowWatch) drop(n int) {
	if n == 0 {
		return
	}
	w.head += uint64(n)
	clear(w.buf[w.first : w.first+n]) // for the collector: no machine kept
	w.first += n
	switch {
	case w.first == len(w.buf) && cap(w.buf) > 1024:
		w.buf, w.first = nil, 0 // a burst's high-water mark is not kept
	case w.first == len(w.buf):
		w.buf, w.first = w.buf[:0], 0
	case w.first > len(w.buf)/2:
		w.buf = w.buf[:copy(w.buf, w.buf[w.first:])]
		w.first = 0
	}
}

// judge is the timer's function: it judges slow every call that has run
// for d, counts it, and trips the breakers whose rule then holds.
func (w *slowWatch) judge() {
	w.mu.Lock()
	now := time.Since(w.base)
	trips, slowed := w.judgeCalls(now)
	// As older calls leave the current machine's window, its share of slow
	// calls may reach the ratio with no call turning slow: check it now,
	// and again when the window next rolls while it holds slow calls.
	next := time.Duration(-1)
	if m := w.b.cb.Load(); m.slow != nil && !slices.Contains(trips, m) {
		if w.trips(m, now) {
			trips = append(trips, m)
		} else if m.slow.total > 0 { // trips rolled the window up to now
			next = m.slow.nextRoll(now)
		}
	}
	w.armed = false
	if calls := w.calls(); len(calls) > 0 && (next < 0 || time.Duration(calls[0].start)+w.d < next) {
		next = time.Duration(calls[0].start) + w.d
	}
	if next >= 0 {
		w.arm(now, next)
	}
	w.mu.Unlock()
	for range slowed {
		w.b.tel.slow(context.Background())
	}
	for _, m := range trips {
		w.b.tripSlow(m)
	}
}

// judgeCalls judges slow the calls that have run for d by now, and returns
// the machines that must trip and how many calls it judged. w.mu must be
// held.
func (w *slowWatch) judgeCalls(now time.Duration) (trips []*machine, slowed int) {
	calls := w.calls()
	n := 0
	for ; n < len(calls); n++ {
		c := &calls[n]
		if c.over {
			continue
		}
		if time.Duration(c.start)+w.d > now {
			break
		}
		w.slowed(w.head+uint64(n), *c, now)
		slowed++
		if !slices.Contains(trips, c.m) && w.trips(c.m, now) {
			trips = append(trips, c.m)
		}
	}
	w.drop(n)
	return trips, slowed
}

// slowed counts call seq, c, as slow. w.mu must be held.
func (w *slowWatch) slowed(seq uint64, c timedCall, now time.Duration) {
	if w.running == nil {
		w.running = make(map[uint64]timedCall)
	}
	w.running[seq] = c
	if s := c.m.slow; s != nil {
		s.roll(s.ageAt(int64(now)))
		s.add(s.ageAt(c.start), 1, 1)
	}
}

// trips reports whether m, the current machine, must trip: it is closed
// and its slow rule holds, or it is half-open and a probe turned slow.
// w.mu must be held.
func (w *slowWatch) trips(m *machine, now time.Duration) bool {
	if w.b.cb.Load() != m || w.b.forced.Load() {
		return false
	}
	if m.open { // a probe: the breaker was half-open when it was admitted
		return true
	}
	m.slow.roll(m.slow.ageAt(int64(now)))
	slow, open := m.slow.sums()
	m.State() // rolls gobreaker's window up to now: Counts does not
	c := m.TwoStepCircuitBreaker.Counts()
	calls := uint64(c.TotalSuccesses) + uint64(c.TotalFailures) + uint64(open)
	// Division, not ratio*n, as for FailureRatio.
	return calls >= uint64(w.min) && float64(slow)/float64(calls) >= w.ratio
}

// counts returns the slow calls in m's window now.
func (w *slowWatch) counts(m *machine) uint32 {
	if w == nil || m.slow == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	m.slow.roll(m.slow.ageAt(int64(time.Since(w.base))))
	slow, _ := m.slow.sums()
	return slow
}

// begin returns the context of call seq, whose answer stops its timing.
func (w *slowWatch) begin(ctx context.Context, seq uint64) context.Context {
	ctx, _ = stage.Begin(ctx, func(delta int) {
		if delta > 0 {
			w.answer(seq)
		}
	}, true)
	return ctx
}

// tripSlow opens the breaker from m, the machine whose slow rule held or
// whose probe turned slow, as a failure past its trip rule would.
func (b *Breaker) tripSlow(m *machine) {
	b.changed(m, Open)
	b.flush(context.Background())
}

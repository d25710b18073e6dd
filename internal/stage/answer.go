package stage

import (
	"context"
	"sync/atomic"
	"time"
)

// AnswerClock marks when the dependency answered an attempt, for an
// [Observer] that learns from latency: a caller whose attempt outlives the
// answer (httppolicy's Transport keeps the attempt open while the response
// body streams) puts one in the call's context with [WithAnswerClock] and
// calls [AnswerClock.Answered] when the response headers arrive. Package
// compose then samples the attempt's latency up to that moment instead of
// up to the attempt's end, so that a long stream is not taken for
// congestion.
//
// A policy that admits the call may also watch the clock
// ([AnswerClock.Watch]) to learn of the answer when it happens rather than
// when the call ends: an [AnswerCount] then counts the call as answered
// from its answer until its next attempt starts or the watch ends (package
// adaptive caps only the calls still awaiting their answer while it
// measures the no-load latency).
//
// Start is called by the goroutine that runs the attempt, before fn, and
// Latency after fn has returned; Answered is called inside fn, perhaps on
// another goroutine that fn started, so the mark is atomic. Watch is
// called before the call's first attempt starts, and Unwatch after its
// last one has returned. The zero value is a clock with no attempt
// started and no watch.
type AnswerClock struct {
	start    time.Time    // the current attempt's start; written before fn runs
	answered atomic.Int64 // time from start to the answer, +1 ns; 0: none yet

	// The watch, if any: its state, and the count it adds the call to
	// while the call is answered.
	watch atomic.Int32
	count atomic.Pointer[AnswerCount]
}

// The states of an AnswerClock's watch.
const (
	watchNone     = iota // no watch
	watchClaimed         // Watch is setting the count
	watchAwaiting        // watched, awaiting the answer
	watchAnswered        // watched and answered: counted
)

type answerClockKey struct{}

// clocks is set once a clock has been put in a context in this process:
// until then AnswerClockFrom answers nil without a lookup, which would
// walk the whole context chain of every call that has no clock.
var clocks atomic.Bool

// WithAnswerClock returns ctx carrying c.
func WithAnswerClock(ctx context.Context, c *AnswerClock) context.Context {
	if !clocks.Load() {
		clocks.Store(true)
	}
	return context.WithValue(ctx, answerClockKey{}, c)
}

// AnswerClockFrom returns the clock in ctx, or nil: nil at once, without a
// lookup, while no clock has been put in a context in this process.
func AnswerClockFrom(ctx context.Context) *AnswerClock {
	if !clocks.Load() {
		return nil
	}
	c, _ := ctx.Value(answerClockKey{}).(*AnswerClock)
	return c
}

// Start begins an attempt at now and forgets the previous one's answer: a
// watched call that was answered awaits an answer again, and leaves its
// count.
func (c *AnswerClock) Start(now time.Time) {
	c.start = now
	c.answered.Store(0)
	if c.watch.Load() == watchAnswered && c.watch.CompareAndSwap(watchAnswered, watchAwaiting) {
		c.count.Load().add(-1)
	}
}

// Answered records now as the moment the current attempt was answered,
// unless it was already, and adds a watched call to its count. It is safe
// on a nil clock (it does nothing).
func (c *AnswerClock) Answered() {
	if c == nil {
		return
	}
	if c.answered.Load() == 0 {
		// time.Since uses the monotonic reading taken by Start.
		c.answered.CompareAndSwap(0, int64(time.Since(c.start))+1)
	}
	if c.watch.Load() == watchAwaiting && c.watch.CompareAndSwap(watchAwaiting, watchAnswered) {
		c.count.Load().add(1)
	}
}

// Latency returns the time from the attempt's start to its answer, if it
// was answered, or else to end.
func (c *AnswerClock) Latency(end time.Time) time.Duration {
	if a := c.answered.Load(); a > 0 {
		return time.Duration(a - 1)
	}
	return end.Sub(c.start)
}

// Watch makes n count the call as answered from its answer (Answered)
// until its next attempt starts (Start) or [AnswerClock.Unwatch]; the call
// awaits its answer meanwhile, whatever an earlier attempt's answer was.
// One count watches a clock at a time: Watch returns false, and does
// nothing, if another watch is on (a policy nested in the one that watches)
// or c is nil. A true return must be followed by exactly one Unwatch.
func (c *AnswerClock) Watch(n *AnswerCount) bool {
	if c == nil || !c.watch.CompareAndSwap(watchNone, watchClaimed) {
		return false
	}
	c.count.Store(n)
	c.watch.Store(watchAwaiting)
	return true
}

// Unwatch ends the watch Watch began, and takes the call out of its count
// if it was answered. It reports whether the call was answered.
func (c *AnswerClock) Unwatch() (answered bool) {
	if c.watch.Swap(watchNone) == watchAnswered {
		c.count.Load().add(-1)
		return true
	}
	return false
}

// AnswerCount counts the calls whose dependency has answered, among those
// watched through their [AnswerClock] (see [AnswerClock.Watch]), for a
// policy that admits calls by how many still await their answer. Notify,
// if not nil, is called after every change of the count, on the goroutine
// that changed it (the one that called Answered, Start or Unwatch); set it
// before the first Watch. The zero value counts from 0 and notifies
// nobody. An AnswerCount is safe for concurrent use; it must not be copied
// after first use.
type AnswerCount struct {
	Notify func()
	n      atomic.Int64
}

// Load returns the number of watched calls answered now (never negative).
func (a *AnswerCount) Load() int {
	return int(max(a.n.Load(), 0))
}

func (a *AnswerCount) add(d int64) {
	a.n.Add(d)
	if a.Notify != nil {
		a.Notify()
	}
}

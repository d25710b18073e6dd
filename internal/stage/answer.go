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
// Start is called by the goroutine that runs the attempt, before fn, and
// Latency after fn has returned; Answered is called inside fn, perhaps on
// another goroutine that fn started, so the mark is atomic.
type AnswerClock struct {
	start    time.Time    // the current attempt's start; written before fn runs
	answered atomic.Int64 // time from start to the answer, +1 ns; 0: none yet
}

type answerClockKey struct{}

// WithAnswerClock returns ctx carrying c.
func WithAnswerClock(ctx context.Context, c *AnswerClock) context.Context {
	return context.WithValue(ctx, answerClockKey{}, c)
}

// AnswerClockFrom returns the clock in ctx, or nil.
func AnswerClockFrom(ctx context.Context) *AnswerClock {
	c, _ := ctx.Value(answerClockKey{}).(*AnswerClock)
	return c
}

// Start begins an attempt at now and forgets the previous one's answer.
func (c *AnswerClock) Start(now time.Time) {
	c.start = now
	c.answered.Store(0)
}

// Answered records now as the moment the current attempt was answered,
// unless it was already. It is safe on a nil clock (it does nothing).
func (c *AnswerClock) Answered() {
	if c != nil && c.answered.Load() == 0 {
		// time.Since uses the monotonic reading taken by Start.
		c.answered.CompareAndSwap(0, int64(time.Since(c.start))+1)
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

package stage

import "context"

// ClockContext is a context carrying its own [AnswerClock], as
// [WithAnswerClock] would return: a caller that holds one in a value of
// its own (httppolicy's exchange) spares WithAnswerClock's allocation.
// Call Init before any other method; it is then safe for concurrent use as
// any context. The zero value is not usable.
type ClockContext struct {
	context.Context
	Clock AnswerClock
}

// Init makes c a child of parent that carries c.Clock, and returns c.
func (c *ClockContext) Init(parent context.Context) context.Context {
	if !clocks.Load() {
		clocks.Store(true)
	}
	c.Context = parent
	return c
}

// Value returns &c.Clock for the clock's key and parent's value for any
// other.
func (c *ClockContext) Value(key any) any {
	if _, ok := key.(answerClockKey); ok {
		return &c.Clock
	}
	return c.Context.Value(key)
}

package stage

import (
	"context"
	"sync/atomic"
	"time"
)

// Attempt is one attempt of a call that an adaptive limit samples, carried
// in the attempt's context: when it began and when the dependency
// answered. httppolicy's Transport marks the answer (the response
// headers) with [Answered]; a stream read after that is not latency.
type Attempt struct {
	start time.Time
	// answered is the time from start to the answer plus 1 ns; 0: none
	// yet; -1: the attempt has ended, and a late mark counts nothing.
	answered atomic.Int64
	// count is told +1 at the answer and -1 when an answered attempt ends:
	// the limiter's count of the calls in flight that have their answer.
	count  func(delta int)
	parent *Attempt // the attempt of an enclosing call, if any
}

type attemptKey struct{}

// attemptContext carries an Attempt: one allocation for both.
type attemptContext struct {
	context.Context
	a Attempt
}

func (c *attemptContext) Value(key any) any {
	if key == (attemptKey{}) {
		return &c.a
	}
	return c.Context.Value(key)
}

// Begin starts an attempt now and returns the context it runs with.
// count, if not nil, is told of the answer (+1) and of the end of an
// answered attempt (-1).
func Begin(ctx context.Context, count func(delta int)) (context.Context, *Attempt) {
	c := &attemptContext{Context: ctx}
	c.a.start = time.Now()
	c.a.count = count
	c.a.parent, _ = ctx.Value(attemptKey{}).(*Attempt)
	return c, &c.a
}

// Answered marks the answer of the attempt ctx belongs to, and of the
// attempts of enclosing calls. Only the first mark of each counts.
func Answered(ctx context.Context) {
	a, _ := ctx.Value(attemptKey{}).(*Attempt)
	for ; a != nil; a = a.parent {
		if a.answered.CompareAndSwap(0, int64(time.Since(a.start))+1) && a.count != nil {
			a.count(1)
		}
	}
}

// End ends the attempt at now and returns its latency: up to its answer,
// if one was marked, else up to now.
func (a *Attempt) End(now time.Time) time.Duration {
	v := a.answered.Swap(-1)
	if v <= 0 {
		return now.Sub(a.start)
	}
	if a.count != nil {
		a.count(-1)
	}
	return time.Duration(v - 1)
}

package stage

import (
	"context"
	"sync/atomic"
	"time"
)

// Attempt is the record of the attempt a context belongs to. Each layer
// that starts an attempt (a retry, a hedge, an adaptive limit) puts one in
// the attempt's context that copies the enclosing record and sets its part.
type Attempt struct {
	Retry, Hedge int             // the attempt's numbers under the innermost of each, or 0
	Call         context.Context // the innermost retry's call, for [WaitRefused]
	sample       *Sample         // the innermost adaptive limit's
}

// Sample is an adaptive limit's sample of an attempt: when it began and
// when the dependency answered. httppolicy's Transport marks the answer
// (the response headers) with [Answered]; a stream read after that is not
// latency.
type Sample struct {
	start time.Time
	// answered is the time from start to the answer plus 1 ns; 0: none
	// yet; -1: the attempt has ended, and a late mark counts nothing.
	answered atomic.Int64
	// count, if set, is told +1 at the answer and -1 when an answered
	// attempt ends.
	count  func(delta int)
	parent *Sample // the sample of an enclosing limit, if any
}

type attemptKey struct{}

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

type sampleContext struct {
	attemptContext
	s Sample
}

// Of returns the record of the attempt ctx belongs to, or nil.
func Of(ctx context.Context) *Attempt {
	a, _ := ctx.Value(attemptKey{}).(*Attempt)
	return a
}

// inherit sets c's record to a copy of the one in c's parent context.
func (c *attemptContext) inherit() {
	if p := Of(c.Context); p != nil {
		c.a = *p
	}
}

// WithRetry returns the context of attempt n of a retry's call.
func WithRetry(call context.Context, n int) context.Context {
	c := &attemptContext{Context: call}
	c.inherit()
	c.a.Retry, c.a.Call = n, call
	return c
}

// WithHedge returns the context of hedged attempt n.
func WithHedge(ctx context.Context, n int) context.Context {
	c := &attemptContext{Context: ctx}
	c.inherit()
	c.a.Hedge = n
	return c
}

// Begin starts an adaptive limit's sample of the attempt ctx belongs to,
// and returns the context that carries it.
func Begin(ctx context.Context, count func(delta int)) (context.Context, *Sample) {
	c := &sampleContext{attemptContext: attemptContext{Context: ctx}}
	c.inherit()
	c.s.start = time.Now()
	c.s.count = count
	c.s.parent = c.a.sample
	c.a.sample = &c.s
	return c, &c.s
}

// Answered marks the answer of the attempt ctx belongs to, in its sample
// and in those of enclosing limits. Only the first mark of each counts.
func Answered(ctx context.Context) {
	a := Of(ctx)
	if a == nil {
		return
	}
	for s := a.sample; s != nil; s = s.parent {
		if s.answered.CompareAndSwap(0, int64(time.Since(s.start))+1) && s.count != nil {
			s.count(1)
		}
	}
}

// End ends the sample at now and returns its latency: up to its answer,
// if one was marked, else up to now.
func (s *Sample) End(now time.Time) time.Duration {
	v := s.answered.Swap(-1)
	if v <= 0 {
		return now.Sub(s.start)
	}
	if s.count != nil {
		s.count(-1)
	}
	return time.Duration(v - 1)
}

package hedge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// call is one call of a Hedge. It runs on the caller's goroutine and
// decides everything: which attempt wins, when the next starts, how each
// hedge is counted. Its attempts only report their errors on results.
type call struct {
	h        *Hedge
	attempt  policy.Func
	cancels  []context.CancelCauseFunc // attempt n's at n-1
	starts   []time.Time               // when attempt n started, at n-1 (for a learned delay)
	reported []bool                    // attempt n has reported, at n-1
	running  int
	results  chan result // room for every attempt's
	tried    stage.Tried // the endpoints the attempts were routed to
	timer    *time.Timer
	tick     <-chan time.Time // the timer's channel while armed

	last      error // the latest failure of an attempt that ran fn
	lastN     int
	failures  int // attempts that ran fn and failed
	rejection error
	refused   bool // the budget refused a hedge
	stopped   bool // no more hedges
	fired     bool // a Deadline's timer ended the call's context
	ended     bool
}

type result struct {
	n   int
	err error
}

// run runs a call, and returns the number of the attempt that won or the
// call's error.
func (h *Hedge) run(ctx context.Context, attempt policy.Func) (int, error) {
	if h.s.Budget != nil {
		h.s.Budget.Deposit()
	}
	c := &call{h: h, attempt: attempt, results: make(chan result, 1+h.s.MaxHedges)}
	defer c.end(ctx, 0) // a user callback panicked
	c.launch(ctx, false)
	done := ctx.Done()
	for {
		select {
		case r := <-c.results:
			if ends, n, err := c.result(ctx, r); ends {
				return n, err
			}
		case <-c.tick:
			c.tick = nil
			c.next(ctx, false)
		case <-done:
			if !policy.TimedOut(ctx) {
				c.end(ctx, 0)
				if c.last != nil {
					return 0, fmt.Errorf("%s: %w after attempt %d: %w", h.rec.prefix, ctx.Err(), c.lastN, policy.Unmark(c.last))
				}
				return 0, ctx.Err()
			}
			done = nil
			c.fire(ctx)
		}
	}
}

// fire stops the call after a Deadline's timer ended ctx: no more hedges,
// no winner, and the running attempts, canceled with a cause that matches
// both ErrLost and the Deadline's, decide the outcome, as a Deadline waits
// for fn.
func (c *call) fire(ctx context.Context) {
	if c.fired {
		return
	}
	c.tick = nil
	c.stopped, c.fired = true, true
	for _, cancel := range c.cancels {
		cancel(stopped{context.Cause(ctx)})
	}
}

// launch starts the next attempt, and arms the timer for the one after.
func (c *call) launch(ctx context.Context, afterFailure bool) {
	h := c.h
	n := len(c.cancels) + 1
	if n > 1 {
		if h.s.OnHedge != nil {
			h.s.OnHedge(ctx, n, afterFailure)
		}
		h.rec.started(ctx, n, afterFailure)
	}
	// The attempt keeps ctx's values and deadline, not its cancellation: the
	// call ends it, with a cause that says whether its value is dropped.
	actx, cancel := context.WithCancelCause(uncanceled{context.WithoutCancel(ctx), ctx})
	c.cancels = append(c.cancels, cancel)
	c.reported = append(c.reported, false)
	var start time.Time
	if h.est != nil {
		start = time.Now()
	}
	c.starts = append(c.starts, start)
	c.running++
	go c.run(stage.WithHedge(actx, n, &c.tried), n)
	c.tick = nil
	if d := h.delay(); n <= h.s.MaxHedges && d >= 0 {
		if c.timer == nil {
			c.timer = time.NewTimer(d)
		} else {
			c.timer.Reset(d)
		}
		c.tick = c.timer.C
	}
}

// run runs attempt n, and reports its error. A panic in it goes on up its
// goroutine; a runtime.Goexit ends the call.
func (c *call) run(ctx context.Context, n int) {
	err := policy.Permanent(errExited) // if the attempt panics or calls runtime.Goexit
	defer func() { c.results <- result{n: n, err: err} }()
	err = c.attempt(ctx)
}

// next starts the next hedge if the rules allow.
func (c *call) next(ctx context.Context, afterFailure bool) {
	if c.stopped || len(c.cancels) > c.h.s.MaxHedges || ctx.Err() != nil {
		return
	}
	if b := c.h.s.Budget; b != nil && !b.TryWithdraw() {
		c.refused, c.stopped = true, true
		return
	}
	c.launch(ctx, afterFailure)
}

// result takes the result r of an attempt, and reports whether the call
// ends, with the winner's number or the call's error.
func (c *call) result(ctx context.Context, r result) (bool, int, error) {
	c.running--
	if policy.TimedOut(ctx) {
		c.fire(ctx) // before the loop has seen the timer
	}
	var err error
	switch {
	case r.err == nil && !c.fired:
		c.settled(ctx, r, won)
		c.end(ctx, r.n)
		return true, r.n, nil
	case r.err == nil:
		c.settled(ctx, r, canceled)
		err = ctx.Err() // after a Deadline's timer, which no attempt wins
	case errors.Is(r.err, policy.ErrRejected):
		c.settled(ctx, r, failed)
		c.rejection, c.stopped = r.err, true
	case ctx.Err() != nil:
		c.settled(ctx, r, canceled)
		err = policy.Unmark(r.err)
		if c.last != nil && !errors.Is(r.err, policy.Unmark(c.last)) {
			err = fmt.Errorf("%s: %w after attempt %d: %w", c.h.rec.prefix, err, c.lastN, policy.Unmark(c.last))
		}
	case policy.IsPermanent(r.err), errors.Is(r.err, policy.ErrQuotaSpent):
		c.settled(ctx, r, failed)
		err = policy.Unmark(r.err)
	case c.h.s.ShouldRetry != nil && !c.h.s.ShouldRetry(r.err):
		c.settled(ctx, r, failed)
		err = r.err
	default:
		c.settled(ctx, r, failed)
		c.last, c.lastN = r.err, r.n
		c.failures++
		c.next(ctx, true)
	}
	if err == nil {
		if c.running > 0 {
			return false, 0, nil
		}
		c.end(ctx, 0)
		return true, 0, c.final(ctx)
	}
	c.end(ctx, 0)
	return true, 0, err
}

// settled counts the outcome o of attempt r, a hedge if r.n > 1, and adds
// a success's latency to a learned delay. An attempt not settled yet when
// the call ends is counted by end.
func (c *call) settled(ctx context.Context, r result, o string) {
	c.reported[r.n-1] = true
	if est := c.h.est; est != nil && r.err == nil {
		est.add(time.Since(c.starts[r.n-1]))
	}
	if r.n > 1 {
		c.h.rec.outcome(ctx, o)
	}
}

// final is the error of a call all of whose attempts failed.
func (c *call) final(ctx context.Context) error {
	if c.last == nil {
		return policy.Unmark(c.rejection) // fn never ran
	}
	e := &retry.ExhaustedError{Kind: kind, Name: c.h.s.Name, Attempts: c.failures, Reason: retry.ReasonMaxAttempts, Err: policy.Unmark(c.last)}
	switch {
	case c.rejection != nil:
		e.Reason = retry.ReasonRejected
		e.Rejection, _ = errors.AsType[*policy.RejectedError](c.rejection)
	case c.refused:
		e.Reason = retry.ReasonBudget
	}
	c.h.rec.exhaust(ctx, e.Reason)
	return e
}

// end ends the call, unless it has ended: the attempts still running are
// counted as lost (to winner, if not 0) or canceled, and canceled with
// the cause ErrLost, the winner's without cause. A loser that ran longer
// than the delay was slow: its time so far joins a learned delay.
func (c *call) end(ctx context.Context, winner int) {
	if c.ended {
		return
	}
	c.ended = true
	if c.timer != nil {
		c.timer.Stop()
	}
	o := canceled
	if winner != 0 {
		o = lost
	}
	for i, cancel := range c.cancels {
		n := i + 1
		switch {
		case n == winner:
			cancel(nil)
			continue
		case !c.reported[i] && n > 1:
			c.h.rec.outcome(ctx, o)
		}
		if est := c.h.est; est != nil && !c.reported[i] && winner != 0 {
			if d := time.Since(c.starts[i]); d >= est.delay() {
				est.add(d)
			}
		}
		cancel(ErrLost)
	}
}

// uncanceled is a call's context with its values and deadline but not its
// cancellation.
type uncanceled struct {
	context.Context // context.WithoutCancel(parent)
	parent          context.Context
}

func (c uncanceled) Deadline() (time.Time, bool) { return c.parent.Deadline() }

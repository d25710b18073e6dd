package retry

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
)

// ErrHedgeLost is the cause (see [context.Cause]) with which a [Hedge]
// cancels the attempts still running when its call ends, because another
// attempt won or the call ended otherwise. Such an attempt's error says
// nothing about the dependency: a policy that counts outcomes, such as a
// breaker, should exclude an attempt whose context's cause matches
// ErrHedgeLost. It matches context.Canceled too, so that code returning a
// context's cause (as net/http does) still reads as a cancellation. The
// winner's context is canceled too, once its fn has returned, with the
// cause context.Canceled.
var ErrHedgeLost error = hedgeLost{}

// hedgeLost is ErrHedgeLost's type.
type hedgeLost struct{}

func (hedgeLost) Error() string { return "retry: hedge lost: the call ended with another attempt" }

// Is reports whether target is context.Canceled.
func (hedgeLost) Is(target error) bool { return target == context.Canceled }

// Hedge runs a call that is safe to repeat and, when the first attempt has
// not answered after a delay, starts another beside it, up to MaxHedges.
// The first attempt to succeed wins, and the others are canceled. A failed
// attempt starts the next hedge at once. [HedgeConfig] sets the delay, and
// the package documentation gives the rules. Build one with [NewHedge];
// the zero Hedge is not usable. A Hedge is safe for concurrent use by
// multiple goroutines.
//
// Run calls with [Hedged], around a policy (usually a pipeline). Each
// attempt is a whole run of that policy, with its own bulkhead slot and
// breaker verdict, so a hedged call holds up to 1 + MaxHedges slots at
// once. A Hedge is not a policy for a pipeline's slot: compose.New refuses
// one.
//
// Every attempt runs in its own goroutine, with its own context, for which
// [Attempt] returns its number. A call returns as soon as it has its
// outcome, without waiting for the attempts it canceled. One that ignores
// its context runs on until it returns. The exception is a call whose
// context a Deadline's timer ended (deadline.Fired): it ends as its
// running attempts report, as a Deadline waits for fn.
//
// A panic (or runtime.Goexit) in an attempt that ends before the call has
// its outcome is carried to the caller's goroutine, after the other
// attempts are canceled. The call panics, even if another attempt might
// have won. A losing attempt that panics after the call has its outcome
// has no caller to carry the panic to. The panic goes on up its own
// goroutine and crashes the program, as in any goroutine. So fn must not
// panic on its way out of a canceled attempt, or must recover itself. A
// late attempt's runtime.Goexit ends only that attempt's goroutine.
type Hedge struct {
	s      hedgeSettings
	prefix string
	rec    hedgeRecorder
	est    *delayEstimator // nil: fixed delay
}

// NewHedge returns a Hedge configured by cfg, or an error naming the first
// invalid field of cfg. It never panics.
func NewHedge(cfg HedgeConfig) (*Hedge, error) {
	s, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	h := &Hedge{s: s, prefix: HedgeKind, rec: newHedgeRecorder(cfg.MeterProvider, s.name)}
	if s.name != "" {
		h.prefix += " " + strconv.Quote(s.name)
	}
	if s.quantile != 0 {
		h.est = newDelayEstimator(s.quantile, s.minDelay, s.delay, s.window)
	}
	return h, nil
}

// MaxHedges returns the number of attempts a call may start beside the
// first.
func (h *Hedge) MaxHedges() int { return h.s.maxHedges }

// Delay returns the delay in force: the fixed Delay, or the one learned so
// far. A negative value means that no hedge starts on delay yet: a learned
// delay has too few latencies and no Delay to start with.
func (h *Hedge) Delay() time.Duration {
	if h.est == nil {
		return h.s.delay
	}
	return h.est.delay()
}

// Hedged runs fn under p, and runs it again beside the first attempt after
// the hedge's delay, or at once after a failure, up to MaxHedges more
// times. It returns the value of the first attempt that succeeds, as soon
// as it does, canceling the others with the cause [ErrHedgeLost].
// Otherwise it returns the zero value and the error the package
// documentation's rules give.
//
// Each attempt is a whole run of p (policy.Do with its own result), so
// each takes its own bulkhead slot and breaker verdict. A nil p runs fn
// directly. A losing attempt's value is dropped: if it holds something to
// free (a response body), fn must free it once its context is canceled
// with the cause ErrHedgeLost. The winner's context is canceled as Hedged
// returns, so the value must not need it. Hedged panics if ctx, h or fn is
// nil.
func Hedged[T any](ctx context.Context, h *Hedge, p policy.Policy, fn func(context.Context) (T, error)) (T, error) {
	if ctx == nil {
		panic("retry: nil Context")
	}
	if h == nil {
		panic("retry: nil Hedge")
	}
	if fn == nil {
		panic("retry: nil fn")
	}
	// One result per attempt: attempt n writes only vals[n-1], before it
	// reports its success; the call reads only the winner's, after.
	vals := make([]T, 1+h.s.maxHedges)
	n, err := h.call(ctx, func(ctx context.Context, n int) error {
		var v T
		var err error
		if p == nil {
			v, err = fn(ctx)
		} else {
			v, err = policy.Do(ctx, p, fn)
		}
		if err == nil {
			vals[n-1] = v
		}
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return vals[n-1], nil
}

// Execute is [Hedged] for a fn without a value and with no policy around
// it. It runs fn, concurrently with itself once a hedge starts, and returns
// nil as soon as an attempt succeeds. So fn must publish nothing the
// caller reads unless it knows it won: use Hedged for a value. Execute
// makes Hedge a [policy.Policy], but policy.Do and compose.New, which run
// fn one call at a time, must not be given a Hedge. Execute panics if ctx
// or fn is nil.
func (h *Hedge) Execute(ctx context.Context, fn policy.Func) error {
	if ctx == nil {
		panic("retry: nil Context")
	}
	if fn == nil {
		panic("retry: nil fn")
	}
	_, err := h.call(ctx, func(ctx context.Context, _ int) error { return fn(ctx) })
	return err
}

// attemptFunc runs attempt n (1-based) of a call with ctx, the attempt's
// context.
type attemptFunc func(ctx context.Context, n int) error

// hedgeCall is the state one call's attempts share.
type hedgeCall struct {
	results chan hedgeResult // buffered for every attempt: a send never blocks
	winner  atomic.Int32     // the attempt that succeeded first; 0: none
	// ended is set, under mu, once the call has its outcome; an attempt
	// sends its result under mu only while ended is false, so that a
	// result is either read by the call (which drains the channel as it
	// ends, to carry a panic) or known to be an orphan.
	ended atomic.Bool
	mu    sync.Mutex
	first attemptCtx // attempt 1's
}

// attemptCtx is one attempt's context: its own cancelable context,
// answering [Attempt] with the attempt's number, in one allocation (none
// for the first attempt, whose lives in its hedgeCall).
type attemptCtx struct {
	context.Context
	n int
}

// Value answers the attempt key with the attempt's number.
func (c *attemptCtx) Value(key any) any {
	if _, ok := key.(attemptKey); ok {
		return c.n
	}
	return c.Context.Value(key)
}

// hedgeResult is how an attempt ended.
type hedgeResult struct {
	n        int
	err      error
	won      bool // err == nil and the attempt succeeded first
	panicked bool
	pval     any
	goexit   bool
}

// ok reports whether the attempt succeeded.
func (r *hedgeResult) ok() bool { return r.err == nil && !r.panicked && !r.goexit }

// call runs one call: each attempt runs attempt with its context and
// number. It returns the number of the attempt that won, or the call's
// error.
func (h *Hedge) call(ctx context.Context, attempt attemptFunc) (int, error) {
	if h.s.budget != nil {
		h.s.budget.Deposit()
	}
	l := &hedgeLoop{h: h, attempt: attempt, max: 1 + h.s.maxHedges}
	l.c = &hedgeCall{results: make(chan hedgeResult, l.max)}
	// If a user callback (OnHedge, ShouldRetry) panics, the attempts still
	// running are canceled all the same.
	defer l.abandon()
	l.launch(ctx, false)
	l.arm()
	done := ctx.Done()
	for {
		select {
		case r := <-l.c.results:
			if ends, n, err := l.result(ctx, r); ends {
				return n, err
			}
		case <-l.tick:
			l.tick = nil
			if l.next(ctx, false) {
				l.arm()
			}
		case <-done:
			if !deadline.Fired(ctx) {
				// The caller gave up: stop at once.
				l.end(0)
				if l.o.last != nil {
					return 0, fmt.Errorf("%s: %w after attempt %d: %w", h.prefix, ctx.Err(), l.o.lastN, Unmark(l.o.last))
				}
				return 0, ctx.Err()
			}
			// A Deadline's timer: no more hedges, and the call ends as the
			// attempts running report (the rules below), as a Deadline
			// waits for fn. One refused before fn ran stays a rejection.
			done, l.tick = nil, nil
			l.o.stopped = true
		}
	}
}

// hedgeLoop is the state of one call of a Hedge, owned by the goroutine
// that runs it (call); the attempts share only c with it.
type hedgeLoop struct {
	h       *Hedge
	attempt attemptFunc
	c       *hedgeCall
	cancel1 context.CancelCauseFunc   // attempt 1's context
	cancels []context.CancelCauseFunc // attempt n's, n >= 2, at n-2
	max     int                       // attempts allowed: 1 + MaxHedges
	started int
	running int
	timer   *time.Timer
	tick    <-chan time.Time // the timer's channel while armed
	o       hedgeOutcome
}

// launch starts the next attempt.
func (l *hedgeLoop) launch(ctx context.Context, afterFailure bool) {
	l.started++
	l.running++
	n := l.started
	a := &l.c.first
	if n > 1 {
		if l.h.s.onHedge != nil {
			l.h.s.onHedge(ctx, n, afterFailure)
		}
		l.h.rec.started(ctx, n, afterFailure)
		a = new(attemptCtx)
	}
	actx, cancel := context.WithCancelCause(ctx)
	if n == 1 {
		l.cancel1 = cancel
	} else {
		l.cancels = append(l.cancels, cancel)
	}
	a.Context, a.n = actx, n
	l.h.run(l.c, a, l.attempt)
}

// arm sets the timer for the next hedge, if one may start on delay.
func (l *hedgeLoop) arm() {
	d := l.h.Delay()
	if l.started >= l.max || d < 0 {
		l.tick = nil
		return
	}
	if l.timer == nil {
		l.timer = time.NewTimer(d)
	} else {
		l.timer.Reset(d)
	}
	l.tick = l.timer.C
}

// next starts the next hedge if MaxHedges, the budget and the rules allow,
// and reports whether it did. None starts once an attempt has succeeded
// (its result is on its way) or once the caller's context has ended (the
// attempt would only find the call over).
func (l *hedgeLoop) next(ctx context.Context, afterFailure bool) bool {
	if l.o.stopped || l.started >= l.max || l.c.winner.Load() != 0 || ctx.Err() != nil {
		return false
	}
	if l.h.s.budget != nil && !l.h.s.budget.TryWithdraw() {
		l.o.refused, l.o.stopped = true, true
		return false
	}
	l.launch(ctx, afterFailure)
	return true
}

// result takes the result r of an attempt, and reports whether the call
// ends, with the winner's number or the call's error.
func (l *hedgeLoop) result(ctx context.Context, r hedgeResult) (bool, int, error) {
	l.running--
	if r.panicked || r.goexit {
		l.end(0) // may carry another attempt's panic instead
		if r.panicked {
			panic(r.pval)
		}
		runtime.Goexit()
	}
	if r.won {
		l.end(r.n)
		return true, r.n, nil
	}
	if r.err == nil {
		// A success behind the winner's, whose result is on its way.
		return false, 0, nil
	}
	ends, err, hedgeNow := l.o.result(ctx, l.h, r)
	if ends {
		l.end(0)
		return true, 0, err
	}
	if hedgeNow && l.next(ctx, true) {
		l.arm() // the next hedge on delay counts from this one
	}
	if l.running == 0 {
		l.end(0)
		return true, 0, l.h.final(ctx, l.o.failures, l.o.lastN, l.o.last, l.o.rejection, l.o.refused)
	}
	return false, 0, nil
}

// end stops everything still running: the outcome is decided, winner
// being the attempt that won (0: none). The losers are canceled with the
// cause ErrHedgeLost, the winner (whose fn has returned) with none. A
// panic (or Goexit) of an attempt that ended before, still in the channel,
// is carried to the caller now.
func (l *hedgeLoop) end(winner int) {
	l.c.mu.Lock()
	l.c.ended.Store(true)
	l.c.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.cancelAll(winner)
	for {
		select {
		case r := <-l.c.results:
			if r.panicked {
				panic(r.pval)
			}
			if r.goexit {
				runtime.Goexit()
			}
		default:
			return
		}
	}
}

// cancelAll cancels every attempt's context: the winner's with no cause,
// the others' with ErrHedgeLost.
func (l *hedgeLoop) cancelAll(winner int) {
	cause := func(n int) error {
		if n == winner {
			return nil
		}
		return ErrHedgeLost
	}
	if l.cancel1 != nil {
		l.cancel1(cause(1))
	}
	for i, cancel := range l.cancels {
		cancel(cause(i + 2))
	}
}

// abandon cancels the attempts still running if the call ends without
// end: a user callback panicked.
func (l *hedgeLoop) abandon() {
	if !l.c.ended.Load() {
		l.c.mu.Lock()
		l.c.ended.Store(true)
		l.c.mu.Unlock()
		l.cancelAll(0)
	}
}

// hedgeOutcome gathers what one call's failed attempts have said so far.
type hedgeOutcome struct {
	last      error // the latest failure of an attempt that ran fn
	lastN     int
	failures  int // attempts that ran fn and failed
	rejection error
	refused   bool // the budget refused a hedge
	stopped   bool // no more hedges: refused or rejected
}

// result applies the rules to the failure of attempt r, which neither
// panicked nor called runtime.Goexit. It reports whether the call ends,
// and with what error, or whether the next hedge may start at once.
func (o *hedgeOutcome) result(ctx context.Context, h *Hedge, r hedgeResult) (ends bool, err error, hedgeNow bool) {
	switch {
	case errors.Is(r.err, policy.ErrRejected):
		// A refusal (an open breaker, a full bulkhead) is never hedged
		// around.
		o.rejection, o.stopped = r.err, true
		return false, nil, false
	case ctx.Err() != nil:
		if o.last != nil && !errors.Is(r.err, Unmark(o.last)) {
			return true, fmt.Errorf("%s: %w after attempt %d: %w", h.prefix, Unmark(r.err), o.lastN, Unmark(o.last)), false
		}
		return true, Unmark(r.err), false
	case isPermanent(r.err):
		return true, Unmark(r.err), false
	case h.s.shouldRetry != nil && !h.s.shouldRetry(r.err):
		return true, r.err, false
	}
	o.last, o.lastN = r.err, r.n
	o.failures++
	return false, nil, true
}

// final is the error of a call all of whose attempts failed.
func (h *Hedge) final(ctx context.Context, failures, lastN int, last, rejection error, refused bool) error {
	if last == nil {
		return rejection // fn never ran
	}
	e := &ExhaustedError{Kind: HedgeKind, Name: h.s.name, Attempts: failures, Reason: ReasonMaxAttempts, Err: Unmark(last)}
	switch {
	case rejection != nil:
		e.Reason = ReasonRejected
		e.Rejection, _ = errors.AsType[*policy.RejectedError](rejection)
	case refused:
		e.Reason = ReasonBudget
	}
	h.rec.exhaust(ctx, e.Reason)
	return e
}

// run starts attempt a in a goroutine of its own; its result goes to
// c.results.
func (h *Hedge) run(c *hedgeCall, a *attemptCtx, attempt attemptFunc) {
	var start time.Time
	if h.est != nil {
		start = time.Now()
	}
	go func() {
		r := hedgeResult{n: a.n}
		normal, recovered := false, false
		// Two defers, as singleflight does, to tell a panic from
		// runtime.Goexit: the inner one recovers a panic, the outer one
		// sees a Goexit (neither returned normally nor recovered).
		defer func() {
			if !normal && !recovered {
				r.goexit = true
			}
			h.settle(a, c, &r, start)
		}()
		func() {
			defer func() {
				if !normal {
					if v := recover(); v != nil {
						r.panicked, r.pval, recovered = true, v, true
					}
				}
			}()
			r.err = attempt(a, a.n)
			normal = true
		}()
	}()
}

// settle ends attempt r: a success that comes first wins; the attempt's
// outcome is recorded, then sent to the call if it has not ended. A panic
// the call can no longer take goes on up the attempt's goroutine.
func (h *Hedge) settle(ctx context.Context, c *hedgeCall, r *hedgeResult, start time.Time) {
	if r.ok() && !c.ended.Load() {
		r.won = c.winner.CompareAndSwap(0, int32(r.n))
	}
	h.finish(ctx, c, r, start)
	c.mu.Lock()
	if !c.ended.Load() {
		c.results <- *r
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if r.panicked {
		// No caller to carry it to: the call has its outcome.
		panic(r.pval)
	}
}

// finish records the latency of an attempt that ended, for a learned
// delay, and counts a hedge's outcome.
func (h *Hedge) finish(ctx context.Context, c *hedgeCall, r *hedgeResult, start time.Time) {
	another := c.winner.Load() != 0 && !r.won
	if h.est != nil && !r.panicked && !r.goexit {
		d := time.Since(start)
		switch {
		case r.err == nil:
			h.est.add(d)
		case another && d >= h.est.delay():
			// Canceled because another attempt won, after running longer
			// than the delay: a lower bound, and a slow attempt.
			h.est.add(d)
		}
	}
	if r.n > 1 {
		switch {
		case r.won:
			h.rec.outcome(ctx, HedgeWon)
		case r.ok(), another:
			// Another attempt won (or a success came second).
			h.rec.outcome(ctx, HedgeLost)
		case c.ended.Load(), ctx.Err() != nil:
			// The call ended without a winner, or the caller's context
			// (which the attempt's derives from) ended first.
			h.rec.outcome(ctx, HedgeCanceled)
		default:
			h.rec.outcome(ctx, HedgeFailed)
		}
	}
}

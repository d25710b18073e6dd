package retry

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight/watertight/policy"
)

// ErrHedgeLost is the cause (see [context.Cause]) with which a [Hedge]
// cancels the attempts still running when its call ends, whatever ended
// it. After a Deadline's timer, the cause matches both ErrHedgeLost and
// the Deadline's cause. A policy that counts outcomes, such as a breaker,
// should exclude an attempt with this cause. It matches context.Canceled.
// The winner's context is canceled too, once its fn has returned, with the
// cause context.Canceled.
var ErrHedgeLost error = hedgeLost{}

type hedgeLost struct{}

func (hedgeLost) Error() string        { return "retry: hedge lost: the call ended with another attempt" }
func (hedgeLost) Is(target error) bool { return target == context.Canceled }

// hedgeStopped is the cause with which a Hedge cancels its attempts when a
// Deadline's timer ends the call: it matches ErrHedgeLost, as no attempt
// wins after it, and wraps the Deadline's cause, so that the policies
// below read it as the Deadline's (policy.TimedOut).
type hedgeStopped struct{ cause error }

func (e hedgeStopped) Error() string { return ErrHedgeLost.Error() + ": " + e.cause.Error() }
func (e hedgeStopped) Unwrap() error { return e.cause }
func (hedgeStopped) Is(target error) bool {
	return target == ErrHedgeLost || target == context.Canceled
}

// uncanceled is a call's context with its values and deadline but not its
// cancellation: the call cancels its attempts itself, with the cause that
// tells each whether its value is dropped.
type uncanceled struct {
	context.Context // context.WithoutCancel(parent)
	parent          context.Context
}

func (c uncanceled) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Hedge runs a call that is safe to repeat. When the first attempt has not
// answered after a delay, it starts another beside it, up to MaxHedges. A
// failed attempt starts the next at once. The first success wins, and the
// others are canceled. The package documentation gives the rules. Build
// one with [NewHedge]; the zero Hedge is not usable. A Hedge is safe for
// concurrent use.
//
// Each attempt runs in its own goroutine, with the call's values and
// deadline. Its context ends when the Hedge cancels it, not before: the
// Hedge passes the end of the call's context on. A call returns as soon as
// it has its outcome, without waiting for the attempts it canceled. A call
// whose context a Deadline's timer ended (policy.TimedOut) is the
// exception: it ends as its running attempts report, and none of them
// wins.
//
// A panic (or runtime.Goexit) in an attempt that ends before the call has
// its outcome is carried to the caller, after the other attempts are
// canceled. A losing attempt that panics later crashes the program, as in
// any goroutine. A later runtime.Goexit ends only its own goroutine.
type Hedge struct {
	s   HedgeConfig // resolved
	rec recorder
	est *delayEstimator // nil: fixed delay
}

// NewHedge returns a Hedge configured by cfg, or an error naming the first
// invalid field of cfg.
func NewHedge(cfg HedgeConfig) (*Hedge, error) {
	s, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	h := &Hedge{s: s, rec: newRecorder(s.MeterProvider, HedgeKind, s.Name)}
	if s.Quantile != 0 {
		h.est = newDelayEstimator(s.Quantile, s.MinDelay, s.Delay, s.Window)
	}
	return h, nil
}

// MaxHedges returns the number of attempts a call may start beside the
// first.
func (h *Hedge) MaxHedges() int { return h.s.MaxHedges }

// Delay returns the delay in force: the fixed Delay, or the one learned.
// A negative value means no hedge starts on delay yet.
func (h *Hedge) Delay() time.Duration {
	if h.est == nil {
		return h.s.Delay
	}
	return h.est.delay()
}

// Hedged runs fn under p, hedging it, and returns the value of the first
// attempt that succeeds, or the rules' error. Each attempt is a whole run
// of p (policy.Do), with its own bulkhead slot and breaker verdict, so a
// call may hold 1 + MaxHedges slots. A nil p runs fn directly. Each
// attempt's context answers [Attempt] with its number.
//
// Every value Hedged does not return is dropped: if it holds something to
// free, such as a response body, fn must free it once
// errors.Is(context.Cause(ctx), ErrHedgeLost). Each dropped value's context
// ends with that cause, whether another attempt won, the caller's context
// ended or a Deadline's timer fired; the returned value's never does. The
// winner's context is canceled as Hedged returns.
// Hedged panics if ctx, h or fn is nil.
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
	// Attempt n writes only vals[n-1], before it reports its success.
	vals := make([]T, 1+h.s.MaxHedges)
	n, err := h.call(ctx, func(ctx context.Context) error {
		var v T
		var err error
		if p == nil {
			v, err = fn(ctx)
		} else {
			v, err = policy.Do(ctx, p, fn)
		}
		if err == nil {
			vals[Attempt(ctx)-1] = v
		}
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return vals[n-1], nil
}

// Execute is [Hedged] for fn alone. Its attempts run concurrently, so fn
// must publish nothing unless it knows it won: use Hedged for a value.
// Policies that run fn one call at a time, such as policy.Do and
// compose.New, must not be given a Hedge. Execute panics if ctx or fn is
// nil.
func (h *Hedge) Execute(ctx context.Context, fn policy.Func) error {
	if ctx == nil {
		panic("retry: nil Context")
	}
	if fn == nil {
		panic("retry: nil fn")
	}
	_, err := h.call(ctx, fn)
	return err
}

// hedgeLoop is one call of a Hedge. Its attempts share with it only
// results, winner, ended and mu.
type hedgeLoop struct {
	h       *Hedge
	attempt policy.Func
	cancels []context.CancelCauseFunc // attempt n's at n-1
	running int
	timer   *time.Timer
	tick    <-chan time.Time // the timer's channel while armed

	last      error // the latest failure of an attempt that ran fn
	lastN     int
	failures  int // attempts that ran fn and failed
	rejection error
	refused   bool // the budget refused a hedge
	stopped   bool // no more hedges

	results chan hedgeResult // room for every attempt's
	winner  atomic.Int32     // the first attempt that succeeded; 0: none
	// ended is set under mu once the call has its outcome. An attempt
	// sends its result under mu, only while ended is false.
	ended atomic.Bool
	// fired is set under mu once the loop has seen a Deadline's timer end
	// the call's context: no attempt wins after it. Until then, settle
	// reads call itself.
	fired bool
	call  context.Context // the call's, for as long as the call runs
	mu    sync.Mutex
}

type hedgeResult struct {
	n        int
	err      error
	won      bool
	panicked bool
	pval     any
	goexit   bool
}

func (r *hedgeResult) ok() bool { return r.err == nil && !r.panicked && !r.goexit }

// call runs a call, and returns the number of the attempt that won or the
// call's error.
func (h *Hedge) call(ctx context.Context, attempt policy.Func) (int, error) {
	if h.s.Budget != nil {
		h.s.Budget.Deposit()
	}
	l := &hedgeLoop{h: h, call: ctx, attempt: attempt, results: make(chan hedgeResult, 1+h.s.MaxHedges)}
	defer l.stop(0) // a user callback panicked
	l.launch(ctx, false)
	done := ctx.Done()
	for {
		select {
		case r := <-l.results:
			if ends, n, err := l.result(ctx, r); ends {
				return n, err
			}
		case <-l.tick:
			l.tick = nil
			l.next(ctx, false)
		case <-done:
			if !policy.TimedOut(ctx) {
				l.end(0)
				if l.last != nil {
					return 0, fmt.Errorf("%s: %w after attempt %d: %w", h.rec.prefix, ctx.Err(), l.lastN, Unmark(l.last))
				}
				return 0, ctx.Err()
			}
			// A Deadline's timer: no more hedges, and the running
			// attempts decide, as a Deadline waits for fn.
			done, l.tick = nil, nil
			l.stopped = true
			l.fire(ctx)
		}
	}
}

// launch starts the next attempt, and arms the timer for the one after.
func (l *hedgeLoop) launch(ctx context.Context, afterFailure bool) {
	n := len(l.cancels) + 1
	if n > 1 {
		if l.h.s.OnHedge != nil {
			l.h.s.OnHedge(ctx, n, afterFailure)
		}
		l.h.rec.event(ctx, EventHedge, n, KeyHedgeAfterFailure.Bool(afterFailure))
	}
	actx, cancel := context.WithCancelCause(uncanceled{context.WithoutCancel(ctx), ctx})
	l.cancels = append(l.cancels, cancel)
	l.running++
	l.run(context.WithValue(actx, attemptKey{}, n), n)
	l.tick = nil
	if d := l.h.Delay(); n <= l.h.s.MaxHedges && d >= 0 {
		if l.timer == nil {
			l.timer = time.NewTimer(d)
		} else {
			l.timer.Reset(d)
		}
		l.tick = l.timer.C
	}
}

// next starts the next hedge if the rules allow. None starts once an
// attempt has succeeded or the caller's context has ended.
func (l *hedgeLoop) next(ctx context.Context, afterFailure bool) {
	if l.stopped || len(l.cancels) > l.h.s.MaxHedges || l.winner.Load() != 0 || ctx.Err() != nil {
		return
	}
	if l.h.s.Budget != nil && !l.h.s.Budget.TryWithdraw() {
		l.refused, l.stopped = true, true
		return
	}
	l.launch(ctx, afterFailure)
}

// result takes the result r of an attempt, and reports whether the call
// ends, with the winner's number or the call's error.
func (l *hedgeLoop) result(ctx context.Context, r hedgeResult) (bool, int, error) {
	l.running--
	var err error
	switch {
	case r.panicked || r.goexit:
		l.end(0) // may carry another attempt's panic instead
		if r.panicked {
			panic(r.pval)
		}
		runtime.Goexit()
	case r.won:
		l.end(r.n)
		return true, r.n, nil
	case r.err == nil && l.winner.Load() != 0:
		return false, 0, nil // behind the winner, whose result is on its way
	case r.err == nil:
		err = ctx.Err() // after a Deadline's timer, which no attempt wins
	case errors.Is(r.err, policy.ErrRejected):
		l.rejection, l.stopped = r.err, true
	case ctx.Err() != nil:
		err = Unmark(r.err)
		if l.last != nil && !errors.Is(r.err, Unmark(l.last)) {
			err = fmt.Errorf("%s: %w after attempt %d: %w", l.h.rec.prefix, err, l.lastN, Unmark(l.last))
		}
	case isPermanent(r.err):
		err = Unmark(r.err)
	case l.h.s.ShouldRetry != nil && !l.h.s.ShouldRetry(r.err):
		err = r.err
	default:
		l.last, l.lastN = r.err, r.n
		l.failures++
		l.next(ctx, true)
	}
	if err == nil {
		if l.running > 0 {
			return false, 0, nil
		}
		l.end(0)
		return true, 0, l.final(ctx)
	}
	l.end(0)
	return true, 0, err
}

// final is the error of a call all of whose attempts failed.
func (l *hedgeLoop) final(ctx context.Context) error {
	if l.last == nil {
		return Unmark(l.rejection) // fn never ran
	}
	e := &ExhaustedError{Kind: HedgeKind, Name: l.h.s.Name, Attempts: l.failures, Reason: ReasonMaxAttempts, Err: Unmark(l.last)}
	switch {
	case l.rejection != nil:
		e.Reason = ReasonRejected
		e.Rejection, _ = errors.AsType[*policy.RejectedError](l.rejection)
	case l.refused:
		e.Reason = ReasonBudget
	}
	l.h.rec.exhaust(ctx, e.Reason)
	return e
}

// fire cancels the attempts, all but a winner's, after a Deadline's timer
// ended ctx. None wins after it.
func (l *hedgeLoop) fire(ctx context.Context) {
	cause := hedgeStopped{context.Cause(ctx)}
	l.mu.Lock()
	l.fired = true
	l.mu.Unlock()
	w := int(l.winner.Load())
	for i, cancel := range l.cancels {
		if i+1 != w {
			cancel(cause)
		}
	}
}

// stop ends the call, unless it has ended: no result is sent after it,
// and the attempts are canceled, the winner's without cause.
func (l *hedgeLoop) stop(winner int) {
	l.mu.Lock()
	ended := l.ended.Swap(true)
	l.mu.Unlock()
	if ended {
		return
	}
	if l.timer != nil {
		l.timer.Stop()
	}
	for i, cancel := range l.cancels {
		if i+1 == winner {
			cancel(nil)
		} else {
			cancel(ErrHedgeLost)
		}
	}
}

// end stops the call, and carries to the caller the panic (or Goexit) of
// an attempt whose result is still unread.
func (l *hedgeLoop) end(winner int) {
	l.stop(winner)
	for {
		select {
		case r := <-l.results:
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

// run runs attempt n with ctx in a goroutine of its own.
func (l *hedgeLoop) run(ctx context.Context, n int) {
	var start time.Time
	if l.h.est != nil {
		start = time.Now()
	}
	go func() {
		r := hedgeResult{n: n}
		normal, recovered := false, false
		// Two defers, as in singleflight, tell a panic from a Goexit.
		defer func() {
			if !normal && !recovered {
				r.goexit = true
			}
			l.settle(ctx, &r, start)
		}()
		func() {
			defer func() {
				if !normal {
					if v := recover(); v != nil {
						r.panicked, r.pval, recovered = true, v, true
					}
				}
			}()
			r.err = l.attempt(ctx)
			normal = true
		}()
	}()
}

// settle ends attempt r: a success that comes first wins, unless the
// call has ended or a Deadline's timer fired. The winner is decided under
// mu, so that it is never an attempt that stop or fire canceled as lost.
// It sends r to the call if the call has not ended. A panic no call will
// read goes on up the attempt's goroutine.
func (l *hedgeLoop) settle(ctx context.Context, r *hedgeResult, start time.Time) {
	l.mu.Lock()
	if r.ok() && !l.ended.Load() && !l.fired && !policy.TimedOut(l.call) {
		r.won = l.winner.CompareAndSwap(0, int32(r.n))
	}
	l.mu.Unlock()
	l.record(ctx, r, start)
	l.mu.Lock()
	if !l.ended.Load() {
		l.results <- *r
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	if r.panicked {
		panic(r.pval)
	}
}

// record adds the latency of attempt r to a learned delay, and counts a
// hedge's outcome.
func (l *hedgeLoop) record(ctx context.Context, r *hedgeResult, start time.Time) {
	h := l.h
	another := l.winner.Load() != 0 && !r.won
	if h.est != nil && !r.panicked && !r.goexit {
		// A loser that ran longer than the delay was slow: a lower bound.
		if d := time.Since(start); r.err == nil || another && d >= h.est.delay() {
			h.est.add(d)
		}
	}
	switch {
	case r.n == 1:
	case r.won:
		h.rec.outcome(ctx, HedgeWon)
	case r.ok(), another:
		h.rec.outcome(ctx, HedgeLost)
	case l.ended.Load(), ctx.Err() != nil:
		h.rec.outcome(ctx, HedgeCanceled)
	default:
		h.rec.outcome(ctx, HedgeFailed)
	}
}

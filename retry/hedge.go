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
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// ErrHedgeLost is the cause (see [context.Cause]) with which a [Hedge]
// cancels the attempts still running when its call ends: another attempt
// won, or the call ended otherwise (the caller's context, a fatal error).
// Such an attempt's error says nothing about the dependency, whatever it
// is (an attempt deadline's, say): a policy below the Hedge that counts
// outcomes (a breaker) should exclude an attempt whose context's cause
// matches ErrHedgeLost.
var ErrHedgeLost = errors.New("retry: hedge lost: the call ended with another attempt")

// Hedge runs a call that is safe to repeat and, when the first attempt has
// not answered after a delay, starts another beside it, up to MaxHedges;
// the first attempt to succeed wins, and the others are canceled. A failed
// attempt starts the next hedge at once. See [HedgeConfig] for the delay
// (fixed, or a quantile of recent latencies) and the package documentation
// for the rules. Build one with [NewHedge]; the zero Hedge is not usable.
// A Hedge is safe for concurrent use by multiple goroutines.
//
// Every attempt runs in a goroutine of its own, with a context carrying its
// number (see [Attempt]) and a claim (see policy.Claim), so fn runs
// concurrently with itself: policy.Do publishes only the winner's value.
// Execute returns as soon as the call has its outcome, without waiting for
// the attempts it canceled: one that ignores its context keeps running
// until fn returns, and frees what it holds then. The exception is a call
// whose context a Deadline's timer ended (deadline.Fired): it ends as its
// running attempts report, as a Deadline waits for fn.
//
// The claim: an attempt that holds it (policy.Do claims as fn succeeds; an
// attempt that must run alone claims as it starts) is the call's winner
// unless it fails after all (a policy below turns its success into a
// failure): while it holds the claim, no hedge starts, and the other
// attempts' failures do not end the call. They are kept: a refusal
// (policy.ErrRejected) stops the hedges, the first failure that would end
// the call (marked with [Permanent], or refused by ShouldRetry) ends it,
// unmarked, once the claim holder fails, before anything else starts, and
// any other failure counts in [ExhaustedError.Attempts]. A failure that
// matches context.Canceled or [ErrHedgeLost] (a loser's) counts as none.
// A success that arrives while another attempt holds the claim is not
// kept: its value was not published (policy.Do publishes only the claim
// holder's), so if the claim holder then fails, the call goes on as after
// that failure (the next hedge, if any may start), and may fail although
// an attempt succeeded.
//
// A Bulkhead (or any policy that holds a slot per call) around the Hedge
// counts calls, not attempts: it frees the call's slot when Execute
// returns, which it does without waiting for the losers. A loser whose fn
// honours its canceled context ends at once; one that ignores it goes on
// holding what it holds (a connection, a request in flight) after the
// slot is free, so more than Limit attempts can then be running against
// the dependency. A pool sized for Limit × (1 + MaxHedges) connections
// covers only losers that honour cancellation.
//
// Panics: a panic (or runtime.Goexit) in an attempt that ends before the
// call has its outcome is carried to the caller's goroutine, after the
// other attempts are canceled: the call panics, though another attempt
// might have won later, or its success arrived as the panic did. A losing
// attempt that panics after the call has its outcome (another attempt
// won, or the call failed or was canceled) has no caller left to carry the
// panic to: Execute has returned. Its panic then goes on up its own
// goroutine and crashes the program, as a panic in any goroutine does,
// rather than being swallowed, which would hide a bug. So fn must not
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

// ConcurrentAttempts reports true: a Hedge runs fn concurrently with
// itself. It implements [policy.Concurrent].
func (h *Hedge) ConcurrentAttempts() bool { return true }

var _ policy.Concurrent = (*Hedge)(nil)

// Delay returns the delay in force: the fixed Delay, or the one learned so
// far; a negative value means that no hedge starts on delay yet (a learned
// delay without enough latencies and no Delay to start with).
func (h *Hedge) Delay() time.Duration {
	if h.est == nil {
		return h.s.delay
	}
	return h.est.delay()
}

// hedgeCall is the state one call's attempts share.
type hedgeCall struct {
	results chan hedgeResult // buffered for every attempt: a send never blocks
	winner  atomic.Int32     // the attempt that holds the claim; 0: none
	// ended is set, under mu, once Execute has its outcome; an attempt
	// sends its result under mu only while ended is false, so that a
	// result is either read by Execute (which drains the channel as it
	// ends, to carry a panic) or known to be an orphan.
	ended atomic.Bool
	mu    sync.Mutex
	first hedgeClaim // attempt 1's
}

// hedgeClaim is one attempt's policy.Claimer, and its context: the call's
// (through policy.WithClaimer, holding the claim) answering [Attempt] with
// the attempt's number, so that an attempt's context costs two
// allocations, not three. The first attempt's lives in its hedgeCall.
type hedgeClaim struct {
	context.Context
	call *hedgeCall
	n    int32
}

// Claim grants the claim to the first attempt that asks, and again to it.
func (c *hedgeClaim) Claim() bool {
	return c.call.winner.CompareAndSwap(0, c.n) || c.call.winner.Load() == c.n
}

// Value answers the attempt key with the attempt's number.
func (c *hedgeClaim) Value(key any) any {
	if _, ok := key.(attemptKey); ok {
		return int(c.n)
	}
	return c.Context.Value(key)
}

// hedgeResult is how an attempt ended.
type hedgeResult struct {
	n        int
	err      error
	claimed  bool // err == nil and the attempt holds the claim
	panicked bool
	pval     any
	goexit   bool
}

// Execute runs fn, and runs it again beside the first attempt after the
// delay or at once after a failure, up to MaxHedges more times, until an
// attempt succeeds; it returns nil as soon as one does, canceling the
// others. Otherwise it returns the error the rules in the package
// documentation give. It panics if ctx or fn is nil.
func (h *Hedge) Execute(ctx context.Context, fn policy.Func) error {
	if ctx == nil {
		panic("retry: nil Context")
	}
	if fn == nil {
		panic("retry: nil fn")
	}
	return h.call(ctx, fn, nil)
}

// call runs one call: each attempt runs fn with its context, or, if fn is
// nil, attempt with its context and number (package compose's way in,
// through the hedger face).
func (h *Hedge) call(ctx context.Context, fn policy.Func, attempt stage.AttemptFunc) error {
	if h.s.budget != nil {
		h.s.budget.Deposit()
	}
	l := &hedgeLoop{h: h, fn: fn, attempt: attempt, max: 1 + h.s.maxHedges}
	l.c = &hedgeCall{results: make(chan hedgeResult, l.max)}
	actx, cancel := context.WithCancelCause(ctx)
	l.cancel = cancel
	// If a user callback (OnHedge, ShouldRetry) panics, the attempts still
	// running are canceled all the same.
	defer l.abandon()
	l.launch(ctx, actx, false)
	l.arm()
	done := ctx.Done()
	for {
		select {
		case r := <-l.c.results:
			if ends, err := l.result(ctx, actx, r); ends {
				return err
			}
		case <-l.tick:
			l.tick = nil
			if l.next(ctx, actx, false) {
				l.arm()
			}
		case <-done:
			if !deadline.Fired(ctx) {
				// The caller gave up: stop at once.
				l.end()
				if l.o.last != nil {
					return fmt.Errorf("%s: %w after attempt %d: %w", h.prefix, ctx.Err(), l.o.lastN, Unmark(l.o.last))
				}
				return ctx.Err()
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
	fn      policy.Func
	attempt stage.AttemptFunc
	c       *hedgeCall
	cancel  context.CancelCauseFunc // cancels the attempts' context
	max     int                     // attempts allowed: 1 + MaxHedges
	started int
	running int
	timer   *time.Timer
	tick    <-chan time.Time // the timer's channel while armed
	o       hedgeOutcome
}

// launch starts the next attempt.
func (l *hedgeLoop) launch(ctx, actx context.Context, afterFailure bool) {
	l.started++
	l.running++
	if l.started > 1 {
		if l.h.s.onHedge != nil {
			l.h.s.onHedge(ctx, l.started, afterFailure)
		}
		l.h.rec.started(ctx, l.started, afterFailure)
	}
	l.h.run(l.c, actx, l.fn, l.attempt, l.started)
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
// and reports whether it did. None starts once an attempt holds the claim
// (its success is being delivered: a stream read by the caller, say, or an
// attempt that claimed early to say it must run alone) or once the
// caller's context has ended (the attempt would only find the call over).
func (l *hedgeLoop) next(ctx, actx context.Context, afterFailure bool) bool {
	if l.o.stopped || l.o.terminal != nil || l.started >= l.max || l.c.winner.Load() != 0 || ctx.Err() != nil {
		return false
	}
	if l.h.s.budget != nil && !l.h.s.budget.TryWithdraw() {
		l.o.refused, l.o.stopped = true, true
		return false
	}
	l.launch(ctx, actx, afterFailure)
	return true
}

// result takes the result r of an attempt, and reports whether the call
// ends, and with what error.
func (l *hedgeLoop) result(ctx, actx context.Context, r hedgeResult) (bool, error) {
	l.running--
	if r.panicked || r.goexit {
		l.end() // may carry another attempt's panic instead
		if r.panicked {
			panic(r.pval)
		}
		runtime.Goexit()
	}
	ends, err, hedgeNow := l.o.result(ctx, l.h, r, l.c.winner.Load() != 0)
	if ends {
		l.end()
		return true, err
	}
	if hedgeNow && l.next(ctx, actx, true) {
		l.arm() // the next hedge on delay counts from this one
	}
	if l.running == 0 {
		l.end()
		return true, l.h.final(ctx, l.o.failures, l.o.lastN, l.o.last, l.o.rejection, l.o.refused)
	}
	return false, nil
}

// end stops everything still running: the outcome is decided. A panic (or
// Goexit) of an attempt that ended before, still in the channel, is
// carried to the caller now.
func (l *hedgeLoop) end() {
	l.c.mu.Lock()
	l.c.ended.Store(true)
	l.c.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.cancel(ErrHedgeLost)
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

// abandon cancels the attempts still running if the call ends without
// end: a user callback panicked.
func (l *hedgeLoop) abandon() {
	if !l.c.ended.Load() {
		l.c.mu.Lock()
		l.c.ended.Store(true)
		l.c.mu.Unlock()
		l.cancel(ErrHedgeLost)
	}
}

// hedgeOutcome gathers what one call's attempts have said so far.
type hedgeOutcome struct {
	last      error // the latest failure of an attempt that ran fn
	lastN     int
	failures  int // attempts that ran fn and failed
	rejection error
	refused   bool // the budget refused a hedge
	stopped   bool // no more hedges: refused or rejected
	// terminal: the first failure that ends the call (Permanent, or one
	// ShouldRetry refuses) of an attempt that ended while another held the
	// claim, unmarked: the call ends with it if the claim holder fails in
	// its turn.
	terminal error
}

// result applies the rules to the result r of an attempt that neither
// panicked nor called runtime.Goexit, winnerHeld saying whether another
// attempt holds the claim. It reports whether the call ends, and with what
// error, or whether the next hedge may start at once.
func (o *hedgeOutcome) result(ctx context.Context, h *Hedge, r hedgeResult, winnerHeld bool) (ends bool, err error, hedgeNow bool) {
	switch {
	case r.err == nil && r.claimed:
		return true, nil, false
	case r.err == nil:
		// A success that found the claim held by another attempt, which
		// has not answered yet: nothing to publish.
		return false, nil, false
	case o.terminal != nil && !winnerHeld:
		// The claim holder failed after an attempt that failed for good
		// while it held the claim: the call ends with that failure, the
		// first.
		return true, o.terminal, false
	case winnerHeld:
		o.whileHeld(ctx, h, r)
		return false, nil, false
	case errors.Is(r.err, policy.ErrRejected):
		// A refusal (an open breaker) is never hedged around.
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

// whileHeld keeps the failure r of an attempt that ended while another
// holds the claim: the call's outcome is the winner's, and no attempt
// starts in its place, but if the winner fails in its turn (a policy below
// turns its success into a failure), a refusal or a failure that ends the
// call, the first of them, decides then; another counts as the latest
// failure. One canceled (a loser, as the winner's Transport cancels them)
// is no failure.
func (o *hedgeOutcome) whileHeld(ctx context.Context, h *Hedge, r hedgeResult) {
	switch {
	case errors.Is(r.err, policy.ErrRejected):
		o.rejection, o.stopped = r.err, true
	case ctx.Err() != nil, errors.Is(r.err, context.Canceled), errors.Is(r.err, ErrHedgeLost):
		// Canceled, or the caller's context ended: says nothing.
	case o.terminal == nil && isPermanent(r.err):
		o.terminal = Unmark(r.err)
	case o.terminal == nil && h.s.shouldRetry != nil && !h.s.shouldRetry(r.err):
		o.terminal = r.err
	default:
		o.last, o.lastN = r.err, r.n
		o.failures++
	}
}

// final is the error of a call all of whose attempts ended without a
// winner.
func (h *Hedge) final(ctx context.Context, failures, lastN int, last, rejection error, refused bool) error {
	if last == nil {
		if rejection != nil {
			return rejection // fn never ran
		}
		// Only successes that lost the claim to an attempt whose success
		// a policy below then turned into a failure: rare, and still no
		// outcome to publish.
		return fmt.Errorf("%s: %w", h.prefix, ErrHedgeLost)
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

// run starts attempt n in a goroutine of its own, running fn, or attempt if
// fn is nil; its result goes to c.results.
func (h *Hedge) run(c *hedgeCall, ctx context.Context, fn policy.Func, attempt stage.AttemptFunc, n int) {
	claim := &c.first
	if n > 1 {
		claim = new(hedgeClaim)
	}
	claim.call, claim.n = c, int32(n)
	claim.Context = policy.WithClaimer(ctx, claim)
	var actx context.Context = claim
	var start time.Time
	if h.est != nil {
		start = time.Now()
	}
	go func() {
		r := hedgeResult{n: n}
		normal, recovered := false, false
		// Two defers, as singleflight does, to tell a panic from
		// runtime.Goexit: the inner one recovers a panic, the outer one
		// sees a Goexit (neither returned normally nor recovered).
		defer func() {
			if !normal && !recovered {
				r.goexit = true
			}
			h.finish(actx, c, claim, &r, start)
			c.mu.Lock()
			if !c.ended.Load() {
				c.results <- r
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			if r.panicked {
				// No caller to carry it to: the call has its outcome.
				panic(r.pval)
			}
		}()
		func() {
			defer func() {
				if !normal {
					if v := recover(); v != nil {
						r.panicked, r.pval, recovered = true, v, true
					}
				}
			}()
			if fn != nil {
				r.err = fn(actx)
			} else {
				r.err = attempt(actx, n)
			}
			normal = true
		}()
	}()
}

// finish settles the claim of an attempt that ended, records its latency
// for a learned delay, and counts a hedge's outcome.
func (h *Hedge) finish(ctx context.Context, c *hedgeCall, claim *hedgeClaim, r *hedgeResult, start time.Time) {
	if r.err == nil && !r.panicked && !r.goexit {
		r.claimed = claim.Claim()
	} else {
		// A winner whose success a policy below turned into a failure (or
		// whose fn panicked after Do claimed) gives the claim back.
		c.winner.CompareAndSwap(claim.n, 0)
	}
	ended := c.ended.Load()
	if h.est != nil && !r.panicked && !r.goexit {
		d := time.Since(start)
		switch {
		case r.err == nil:
			h.est.add(d)
		case ended && c.winner.Load() != 0 && d >= h.est.delay():
			// Canceled because another attempt won, after running longer
			// than the delay: a lower bound, and a slow attempt.
			h.est.add(d)
		}
	}
	if r.n > 1 {
		switch {
		case r.claimed:
			h.rec.outcome(ctx, HedgeWon)
		case r.err == nil && !r.panicked && !r.goexit, c.winner.Load() != 0:
			// Another attempt holds the claim (or a success came second).
			h.rec.outcome(ctx, HedgeLost)
		case ended, ctx.Err() != nil:
			// The call ended without a winner, or the caller's context
			// (which the attempt's derives from) ended first.
			h.rec.outcome(ctx, HedgeCanceled)
		default:
			h.rec.outcome(ctx, HedgeFailed)
		}
	}
}

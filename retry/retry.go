package retry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// Retry runs a call again, after a wait, when it fails with an error worth
// retrying; the package documentation gives the rules. Build one with
// [New]; the zero Retry is not usable. A Retry is immutable and safe for
// concurrent use by multiple goroutines.
type Retry struct {
	s      settings
	prefix string // "retry" or `retry "name"`, for error messages
	rec    recorder
	// expo is the default schedule, copied into each call's state.
	expo backoff.ExponentialBackOff
}

// New returns a Retry configured by cfg, or an error naming the first invalid
// field of cfg. It never panics.
func New(cfg Config) (*Retry, error) {
	s, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	r := &Retry{s: s, prefix: "retry", rec: newRecorder(telemetry.NewInstruments(cfg.MeterProvider), Kind, s.name)}
	if s.name != "" {
		r.prefix += " " + strconv.Quote(s.name)
	}
	// Copied into each call's state, which holds it in place: no allocation
	// of its own. MaxElapsedTime 0: backoff's 15-minute default must never
	// end a call (MaxAttempts and the context's deadline do), and
	// NextBackOff then never returns Stop.
	r.expo = backoff.ExponentialBackOff{
		InitialInterval:     s.initial,
		RandomizationFactor: s.jitter,
		Multiplier:          s.multiplier,
		MaxInterval:         s.max,
		MaxElapsedTime:      0,
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	return r, nil
}

// MaxAttempts returns the number of tries a call gets, the first included.
func (r *Retry) MaxAttempts() int { return r.s.maxAttempts }

// Execute runs fn, and runs it again while it fails with an error worth
// retrying, waiting between attempts as the schedule asks. It returns nil
// as soon as an attempt succeeds, and otherwise the error the package
// documentation's rules give. Attempt n runs with a context for which
// [Attempt] returns n. It panics if ctx or fn is nil.
func (r *Retry) Execute(ctx context.Context, fn policy.Func) error {
	if ctx == nil {
		panic("retry: nil Context")
	}
	if fn == nil {
		panic("retry: nil fn")
	}
	l := r.Start(ctx)
	for l.Next(fn(l.Attempt())) {
	}
	return l.Err()
}

// Loop is one call's attempts under a [Retry], run by the caller: the
// two-step form of Execute, for a caller that must run each attempt
// itself. Start it with [Retry.Start], then run each attempt with the
// context Attempt returns, and give its outcome to Next:
//
//	l := r.Start(ctx)
//	for l.Next(attempt(l.Attempt())) {
//	}
//	return l.Err()
//
// A Loop is used by one goroutine. Its zero value is not usable.
type Loop struct {
	r     *Retry
	ctx   context.Context // the call's, which Next's waits honour
	n     int             // the number of the attempt running, or last run
	state *call
	err   error
}

// Start starts a call's attempts. It panics if ctx is nil.
func (r *Retry) Start(ctx context.Context) Loop {
	if ctx == nil {
		panic("retry: nil Context")
	}
	return Loop{r: r, ctx: ctx}
}

// Attempt starts the next attempt and returns the context it must run
// with, for which [Attempt] returns its number.
func (l *Loop) Attempt() context.Context {
	l.n++
	return l.r.attemptContext(l.ctx, l.n)
}

// Next takes the outcome err of the attempt running. It reports whether
// another attempt must run, once it has waited as the schedule asks; if
// not, Err returns the call's error.
func (l *Loop) Next(err error) bool {
	if err == nil {
		l.err = nil
		return false
	}
	again, next, final := l.r.next(l.ctx, l.n, err, l.state)
	l.state, l.err = next, final
	return again
}

// Err returns the call's error once Next has reported false: nil if the
// last attempt succeeded, else the error the package documentation's
// rules give.
func (l *Loop) Err() error { return l.err }

// attemptKey is the context key of the attempt number.
type attemptKey struct{}

// attemptContext returns the context attempt n (1-based) runs with: ctx
// carrying n for [Attempt]. It is the only allocation of a call that
// succeeds at once.
func (r *Retry) attemptContext(ctx context.Context, n int) context.Context {
	if n == 1 && r.s.budget != nil {
		r.s.budget.Deposit()
	}
	return context.WithValue(ctx, attemptKey{}, n)
}

// Attempt returns the 1-based number of the attempt ctx belongs to, or 0
// if ctx is not an attempt's. With nested Retries it is the innermost
// one's number. It panics if ctx is nil.
func Attempt(ctx context.Context) int {
	if ctx == nil {
		panic("retry: nil Context")
	}
	n, _ := ctx.Value(attemptKey{}).(int)
	return n
}

// call is the state of one call between attempts, built at its first
// failure that is retried (a call that succeeds at once builds none) and
// passed from one next to the next.
type call struct {
	// last is the error of the latest attempt that ran fn: once a call is
	// retried, a later rejection is not the call's outcome (see next).
	last error
	// sched is the Config.NewSchedule schedule, nil until first needed.
	sched Schedule
	// expo is the default schedule, when there is no NewSchedule; built
	// says whether it has been reset for this call.
	expo  backoff.ExponentialBackOff
	built bool
}

// next decides what follows the failure of attempt n with err, ctx being the
// call's context (not the attempt's). It either waits (counting the retry,
// adding a span event and calling OnRetry first) and returns again = true
// with the state for the next call of next, or returns again = false with
// the error the call ends with. state must be nil on the first call of next
// for a call and the returned next afterwards. It is what [Retry.Execute]
// runs between attempts.
func (r *Retry) next(ctx context.Context, n int, err error, state *call) (again bool, next *call, final error) {
	if err == nil {
		return false, state, nil
	}
	c := state
	// 1. A rejection (an open breaker, a full bulkhead) is never retried.
	// It is the call's outcome only if fn never ran in this call: after
	// attempts that ran fn and failed, the call ends exhausted with fn's
	// last error, the rejection alongside (not in the chain), so that the
	// caller is not told that fn never ran. c.last is never a rejection
	// (one ends the loop), but the rule must hold regardless. Before the
	// context's rule, which would return the rejection unchanged.
	if errors.Is(err, policy.ErrRejected) {
		if c != nil && c.last != nil && !errors.Is(c.last, policy.ErrRejected) {
			if ctx.Err() != nil {
				// The call's ctx ended the wait that refused the attempt
				// (a Deadline's timer): the context's rule, with fn's last
				// error, which an outer Deadline makes its own.
				return false, state, Unmark(c.last)
			}
			return false, state, r.rejected(ctx, n, err, c.last)
		}
		return false, state, Unmark(err)
	}
	// 2. The caller's cancellation or the call's deadline ends the loop; an
	// outer deadline policy turns the error into its own.
	if ctx.Err() != nil {
		return false, state, Unmark(err)
	}
	// 3. Permanent: end with the marked error itself.
	if isPermanent(err) {
		return false, state, Unmark(err)
	}
	// 4. The user's classification.
	if r.s.shouldRetry != nil && !r.s.shouldRetry(err) {
		return false, state, err
	}
	// 5. Out of attempts.
	if n >= r.s.maxAttempts {
		return false, state, r.exhaust(ctx, n, ReasonMaxAttempts, 0, err)
	}
	// 6. The wait: asked for by the error, or from the schedule.
	wait, reason := r.waitAfter(err, &c)
	if c != nil {
		state = c
	}
	if reason != "" {
		return false, state, r.exhaust(ctx, n, reason, wait, err)
	}
	// 7. Fail now rather than sleep into the deadline (as x/time/rate does).
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Add(wait).Before(deadline) {
		return false, state, r.exhaust(ctx, n, ReasonDeadline, wait, err)
	}
	// 8. The budget, last: a retry refused for another reason must not
	// spend it. A retry whose wait the caller then cancels has spent it.
	if r.s.budget != nil && !r.s.budget.TryWithdraw() {
		return false, state, r.exhaust(ctx, n, ReasonBudget, 0, err)
	}
	// 9. Remember the failure, record, tell, wait.
	if c == nil {
		c = new(call)
		state = c
	}
	c.last = err
	r.rec.scheduled(ctx, n+1, wait)
	if r.s.onRetry != nil {
		r.s.onRetry(ctx, n, err, wait)
	}
	if wait <= 0 {
		select {
		case <-ctx.Done():
			return false, state, r.interrupted(ctx, n, err)
		default:
			r.rec.attempt(ctx)
			return true, state, nil
		}
	}
	t := time.NewTimer(wait)
	select {
	case <-t.C:
		r.rec.attempt(ctx)
		return true, state, nil
	case <-ctx.Done():
		t.Stop()
		return false, state, r.interrupted(ctx, n, err)
	}
}

// waitAfter returns the wait before the attempt after err: the one err asks
// for (a Retry-After), or the schedule's next, built only now that an
// attempt has failed, once per call, in *c (created if nil). A reason that
// is not empty ends the call exhausted instead, the wait being the one
// refused (0 if none).
func (r *Retry) waitAfter(err error, c **call) (time.Duration, string) {
	if ra, ok := errors.AsType[retryAfterError](err); ok && ra.RetryAfter() > 0 {
		if wait := ra.RetryAfter(); wait > r.s.max {
			return wait, ReasonRetryAfter
		}
		return ra.RetryAfter(), ""
	}
	if *c == nil {
		*c = new(call)
	}
	cl := *c
	var wait time.Duration
	if r.s.newSchedule == nil {
		if !cl.built {
			cl.expo = r.expo
			cl.expo.Reset()
			cl.built = true
		}
		// backoff caps its interval before randomising it: the result is
		// capped below. It randomises in float64, and near math.MaxInt64
		// the conversion back overflows to a negative Duration: such a
		// wait is as long as allowed, not none.
		if wait = cl.expo.NextBackOff(); wait < 0 {
			wait = r.s.max
		}
	} else {
		if cl.sched == nil {
			if cl.sched = r.s.newSchedule(); cl.sched == nil {
				panic("retry: Config.NewSchedule returned nil")
			}
		}
		w, ok := cl.sched.Next()
		if !ok {
			return 0, ReasonStopped
		}
		wait = max(w, 0) // a negative wait means none
	}
	return min(wait, r.s.max), ""
}

// exhaust counts and returns an exhaustion.
func (r *Retry) exhaust(ctx context.Context, n int, reason string, wait time.Duration, err error) error {
	r.rec.exhaust(ctx, reason)
	return &ExhaustedError{
		Name:        r.s.name,
		Attempts:    n,
		Reason:      reason,
		Wait:        wait,
		MaxInterval: r.s.max,
		Err:         err,
	}
}

// rejected counts and returns the exhaustion of a call whose attempt n was
// refused with rejection after attempts 1 to n-1 had run fn, the last
// failing with last.
func (r *Retry) rejected(ctx context.Context, n int, rejection, last error) error {
	r.rec.exhaust(ctx, ReasonRejected)
	e := &ExhaustedError{
		Name:        r.s.name,
		Attempts:    n - 1,
		Reason:      ReasonRejected,
		MaxInterval: r.s.max,
		Err:         last,
	}
	// A rejection that holds no *policy.RejectedError (a bare sentinel) is
	// a rejection all the same: Rejection stays nil.
	e.Rejection, _ = errors.AsType[*policy.RejectedError](rejection)
	return e
}

// interrupted is the error of a call whose context ended during a wait: it
// matches both ctx.Err() and the last attempt's error.
func (r *Retry) interrupted(ctx context.Context, n int, err error) error {
	return fmt.Errorf("%s: %w while waiting after attempt %d: %w", r.prefix, ctx.Err(), n, err)
}

package retry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// Retry runs a call again, after a wait, when it fails with an error worth
// retrying, by the rules of the package documentation. Build one with
// [New]; the zero Retry is not usable. A Retry is safe for concurrent use.
type Retry struct {
	cur atomic.Pointer[settings] // read once by each call, at Start
	mu  sync.Mutex               // serialises Update
	rec recorder
}

// settings are the settings of a Retry from New or one Update. They never
// change: an Update stores new ones.
type settings struct {
	given Config // as given, with New's Name, MeterProvider, hooks and Budget
	cfg   Config // given, resolved
	rec   *recorder
	expo  backoff.ExponentialBackOff // the default schedule, copied per call
}

// New returns a Retry configured by cfg, or an error naming the first
// invalid field of cfg.
func New(cfg Config) (*Retry, error) {
	s, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	r := &Retry{rec: newRecorder(s.MeterProvider, s.Name)}
	r.cur.Store(r.settings(cfg, s))
	return r, nil
}

// settings returns the settings of cfg, resolved as s.
func (r *Retry) settings(cfg, s Config) *settings {
	return &settings{given: cfg, cfg: s, rec: &r.rec, expo: backoff.ExponentialBackOff{
		InitialInterval:     s.InitialInterval,
		RandomizationFactor: s.Jitter,
		Multiplier:          multiplier,
		MaxInterval:         s.MaxInterval,
		MaxElapsedTime:      0, // MaxAttempts and ctx end a call, not elapsed time
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}}
}

// Execute runs fn until it succeeds or the rules stop it, waiting between
// attempts, and returns nil or the rules' error. Attempt n runs with a
// context for which [Attempt] returns n. It panics if ctx or fn is nil.
func (r *Retry) Execute(ctx context.Context, fn policy.Func) error {
	l := r.Start(ctx)
	if fn == nil {
		panic("retry: nil fn")
	}
	for l.Next(fn(l.Attempt())) {
	}
	return l.Err()
}

// Loop is the two-step form of Execute, for a caller that runs each
// attempt itself:
//
//	l := r.Start(ctx)
//	for l.Next(attempt(l.Attempt())) {
//	}
//	return l.Err()
//
// A Loop is used by one goroutine. Its zero value is not usable.
type Loop struct {
	s     *settings       // read at Start, for the whole call
	ctx   context.Context // the call's
	n     int             // the attempt running, or last run
	state *call
	err   error
}

// Start starts a call with the settings in force: an [Retry.Update] after
// Start does not change them. It panics if ctx is nil.
func (r *Retry) Start(ctx context.Context) Loop {
	if ctx == nil {
		panic("retry: nil Context")
	}
	return Loop{s: r.cur.Load(), ctx: ctx}
}

// Attempt starts the next attempt and returns its context, for which
// [Attempt] returns its number.
func (l *Loop) Attempt() context.Context {
	l.n++
	if l.n == 1 && l.s.cfg.Budget != nil {
		l.s.cfg.Budget.Deposit()
	}
	return stage.WithRetry(l.ctx, l.n)
}

// Next takes the outcome of the attempt running. It reports whether
// another attempt must run, after waiting for it. If not, Err returns the
// call's error.
func (l *Loop) Next(err error) bool {
	var again bool
	again, l.err = l.next(err)
	return again
}

// Err returns the call's error once Next has reported false.
func (l *Loop) Err() error { return l.err }

// Attempt returns the 1-based number of the attempt ctx belongs to, or 0.
// With nested Retries, it is the innermost one's. It panics if ctx is nil.
func Attempt(ctx context.Context) int {
	if ctx == nil {
		panic("retry: nil Context")
	}
	n, _ := stage.Retry(ctx)
	return n
}

// call is a call's state between attempts, built at its first retried
// failure.
type call struct {
	last  error           // the latest error of an attempt that ran fn
	sched backoff.BackOff // built at the first scheduled wait
	expo  backoff.ExponentialBackOff
}

// next applies the rules of the package documentation to err, the
// outcome of attempt l.n, and waits if they say retry.
func (l *Loop) next(err error) (bool, error) {
	s, ctx, n := l.s, l.ctx, l.n
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, policy.ErrRejected):
		// fn ran before: the call is no rejection. The refusal was counted
		// where it was decided, so the call ends as the retry's, even if
		// ctx has ended since.
		if c := l.state; c != nil && c.last != nil && !errors.Is(c.last, policy.ErrRejected) {
			s.rec.exhaust(ctx, ReasonRejected)
			e := &ExhaustedError{Name: s.cfg.Name, Attempts: n - 1, Reason: ReasonRejected, Err: c.last}
			e.Rejection, _ = errors.AsType[*policy.RejectedError](err)
			return false, e
		}
		return false, policy.Unmark(err)
	case ctx.Err() != nil, policy.IsPermanent(err), errors.Is(err, policy.ErrQuotaSpent):
		return false, policy.Unmark(err)
	case s.cfg.ShouldRetry != nil && !s.cfg.ShouldRetry(err):
		return false, err
	case n >= s.cfg.MaxAttempts:
		return false, s.exhaust(ctx, n, ReasonMaxAttempts, 0, err)
	}
	if l.state == nil {
		l.state = new(call)
	}
	wait, reason := l.wait(err)
	if reason == "" {
		// Fail now rather than sleep into the deadline.
		if deadline, ok := ctx.Deadline(); ok && !time.Now().Add(wait).Before(deadline) {
			reason = ReasonDeadline
		} else if s.cfg.Budget != nil && !s.cfg.Budget.TryWithdraw() {
			reason, wait = ReasonBudget, 0
		}
	}
	if reason != "" {
		return false, s.exhaust(ctx, n, reason, wait, err)
	}
	l.state.last = err
	s.rec.scheduled(ctx, n+1, wait)
	if s.cfg.OnRetry != nil {
		s.cfg.OnRetry(ctx, n, err, wait)
	}
	if !sleep(ctx, wait) {
		return false, fmt.Errorf("%s: %w while waiting after attempt %d: %w", s.rec.prefix, ctx.Err(), n, err)
	}
	s.rec.attempts.Add(ctx, 1, s.rec.opts...)
	return true, nil
}

// sleep waits for d, and reports false if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		// Woken late, the next attempt would start with ctx done.
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}

// wait returns the wait before the attempt after err: the one err asks
// for, or the schedule's next. A reason that is not empty ends the call.
func (l *Loop) wait(err error) (time.Duration, string) {
	if ra, ok := errors.AsType[retryAfterError](err); ok {
		if w := ra.RetryAfter(); w > l.s.cfg.MaxInterval {
			return w, ReasonRetryAfter
		} else if w > 0 {
			return w, ""
		}
	}
	c := l.state
	if c.sched == nil {
		c.sched = l.s.schedule(c)
	}
	wait := c.sched.NextBackOff()
	switch {
	case wait == backoff.Stop:
		return 0, ReasonStopped
	case wait < 0 && c.sched == &c.expo:
		// Near math.MaxInt64, backoff's float conversion overflows to a
		// negative wait: as long as allowed, not none.
		return l.s.cfg.MaxInterval, ""
	}
	return min(max(wait, 0), l.s.cfg.MaxInterval), ""
}

// schedule returns a new schedule for call c: Config.NewSchedule's, or the
// exponential one in c.
func (s *settings) schedule(c *call) backoff.BackOff {
	if s.cfg.NewSchedule == nil {
		c.expo = s.expo
		c.expo.Reset()
		return &c.expo
	}
	b := s.cfg.NewSchedule()
	if b == nil {
		panic("retry: Config.NewSchedule returned nil")
	}
	b.Reset() // as backoff.Retry does: a schedule built without it waits 0
	return b
}

func (s *settings) exhaust(ctx context.Context, n int, reason string, wait time.Duration, err error) error {
	s.rec.exhaust(ctx, reason)
	return &ExhaustedError{Name: s.cfg.Name, Attempts: n, Reason: reason, Err: err, wait: wait, maxInterval: s.cfg.MaxInterval}
}

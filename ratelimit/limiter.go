package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// eventHold is the span event of an attempt that waited to be admitted,
// with keyWait, the wait in seconds.
const eventHold = "watertight.ratelimit.hold"

var keyWait = attribute.Key("watertight.ratelimit.wait")

// Limiter admits the attempts of the calls to one dependency at the pace
// the dependency allows: see the package documentation. Build one with
// [New], share it between every pipeline and transport that calls the
// dependency, and give it to the transport as its Signals. The zero value
// is not usable. A Limiter is safe for concurrent use by multiple
// goroutines.
type Limiter struct {
	// epoch is the origin of until: a monotonic clock reading taken at New.
	epoch time.Time
	// until is the end of the hold, in nanoseconds since epoch; 0: no hold
	// (none was set, or the last one is over and was cleared), which
	// admission checks without reading the clock.
	until atomic.Int64

	maxHold  time.Duration
	maxWait  time.Duration
	requests *rate.Limiter // nil: no RequestsPerSecond
	tokens   *rate.Limiter // nil: no TokensPerMinute
	tokenCap int

	throttled *telemetry.Rejection
	rated     *telemetry.Rejection
	waitAttrs []attribute.KeyValue
	onReject  func(ctx context.Context, err *policy.RejectedError)
}

var (
	_ policy.Policy               = (*Limiter)(nil)
	_ httppolicy.Signals          = (*Limiter)(nil)
	_ stage.Stage                 = (*twoPhase)(nil)
	_ interface{ error }          = (*heldError)(nil)
	_ interface{ Unwrap() error } = (*heldError)(nil)
)

// New returns a Limiter configured by cfg, or an error naming the first
// invalid field of cfg. It never panics.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	in := telemetry.NewInstruments(cfg.MeterProvider)
	l := &Limiter{
		epoch:     time.Now(),
		maxHold:   cfg.MaxHold,
		maxWait:   cfg.MaxWait,
		throttled: telemetry.NewRejection(in, Kind, cfg.Name, ReasonThrottled, ErrLimited),
		rated:     telemetry.NewRejection(in, Kind, cfg.Name, ReasonRate, ErrLimited),
		waitAttrs: telemetry.PolicyAttrs(Kind, cfg.Name),
		onReject:  cfg.OnReject,
	}
	if l.maxHold == 0 {
		l.maxHold = DefaultMaxHold
	}
	if l.maxWait == 0 {
		l.maxWait = l.maxHold
	}
	if cfg.RequestsPerSecond > 0 {
		l.requests = rate.NewLimiter(rate.Limit(cfg.RequestsPerSecond), burst(cfg.Burst, cfg.RequestsPerSecond))
	}
	if cfg.TokensPerMinute > 0 {
		l.tokenCap = burst(cfg.TokenBurst, cfg.TokensPerMinute)
		l.tokens = rate.NewLimiter(rate.Limit(cfg.TokensPerMinute/60), l.tokenCap)
	}
	return l, nil
}

// MaxWait returns the longest an attempt waits to be admitted
// (Config.MaxWait after defaults).
func (l *Limiter) MaxWait() time.Duration { return l.maxWait }

// Held returns how much longer the hold lasts from now: 0 if there is none.
func (l *Limiter) Held() time.Duration {
	u := l.until.Load()
	if u == 0 {
		return 0
	}
	return max(time.Duration(u)-time.Since(l.epoch), 0)
}

// Observe feeds the hold from one response of the dependency (see [Hold]);
// it makes the Limiter an [httppolicy.Signals]. A nil resp is ignored. It
// is safe for concurrent use.
func (l *Limiter) Observe(resp *http.Response) {
	if resp == nil {
		return
	}
	// Most responses ask for nothing: say so without reading the clock
	// or parsing a reset.
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable && !spent(resp.Header) {
		return
	}
	now := time.Now()
	if d := Hold(resp.StatusCode, resp.Header, now); d > 0 {
		l.holdFor(now, d)
	}
}

// HoldFor holds every attempt for d from now (capped at Config.MaxHold),
// unless a longer hold is already set: for signals that come from
// elsewhere than an HTTP response (an SDK's own error, a shared store).
// A d <= 0 or longer than a day is ignored. It is safe for concurrent use.
func (l *Limiter) HoldFor(d time.Duration) {
	if d > 0 && d <= maxSignal {
		l.holdFor(time.Now(), d)
	}
}

// holdFor extends the hold to now + min(d, maxHold), never shortening it.
func (l *Limiter) holdFor(now time.Time, d time.Duration) {
	end := int64(now.Sub(l.epoch) + min(d, l.maxHold))
	for {
		cur := l.until.Load()
		if cur >= end || l.until.CompareAndSwap(cur, end) {
			return
		}
	}
}

// Execute runs fn once the attempt is admitted (see the package
// documentation) and returns fn's error; or a rejection (errors.Is
// ErrLimited and policy.ErrRejected) if the wait would outlast the
// deadline of ctx or Config.MaxWait; or ctx.Err() if ctx ends during the
// wait; fn then does not run. A throttled error of fn's with a RetryAfter
// feeds the hold, and comes back wrapped so that its RetryAfter reads 0
// (see "No double wait"). It panics if ctx or fn is nil.
func (l *Limiter) Execute(ctx context.Context, fn policy.Func) error {
	if ctx == nil {
		panic("ratelimit: nil Context")
	}
	if fn == nil {
		panic("ratelimit: nil fn")
	}
	if err := l.enter(ctx); err != nil {
		return err
	}
	// Nothing is held while fn runs, so a panic needs no cleanup.
	return l.exit(fn(ctx))
}

// enter admits one attempt, waiting if the hold or the rate asks.
func (l *Limiter) enter(ctx context.Context) error {
	if ctx == nil {
		panic("ratelimit: nil Context")
	}
	if l.requests == nil && l.tokens == nil {
		u := l.until.Load()
		if u == 0 {
			return nil
		}
		now := time.Now()
		hold := time.Duration(u) - now.Sub(l.epoch)
		if hold <= 0 {
			// The hold is over: clear it, so that admission reads no
			// clock until the next one (a hold set meanwhile is kept).
			l.until.CompareAndSwap(u, 0)
			return nil
		}
		return l.wait(ctx, now, hold, 0, nil, nil)
	}
	now := time.Now()
	hold := time.Duration(l.until.Load()) - now.Sub(l.epoch)
	var req, tok *rate.Reservation
	var rateWait time.Duration
	if l.requests != nil {
		req = l.requests.ReserveN(now, 1)
		rateWait = req.DelayFrom(now)
	}
	if l.tokens != nil {
		tok = l.tokens.ReserveN(now, min(Cost(ctx), l.tokenCap))
		rateWait = max(rateWait, tok.DelayFrom(now))
	}
	if hold <= 0 && rateWait == 0 {
		return nil
	}
	return l.wait(ctx, now, max(hold, 0), rateWait, req, tok)
}

// wait waits hold (the server's) and rateWait (the client-side rate's,
// for which req and tok are reserved) from now, or rejects the attempt if
// that cannot end before ctx's deadline and within maxWait. A hold
// extended during the wait is waited too, within the same bounds.
func (l *Limiter) wait(ctx context.Context, now time.Time, hold, rateWait time.Duration, req, tok *rate.Reservation) error {
	limit := now.Add(l.maxWait)
	if dl, ok := ctx.Deadline(); ok && dl.Before(limit) {
		// Waiting up to the deadline itself would leave the attempt no
		// time: the wait must end strictly before it, as retry's must.
		limit = dl.Add(-1)
	}
	w := max(hold, rateWait)
	if now.Add(w).After(limit) {
		cancel(now, req, tok)
		if hold >= rateWait {
			return l.reject(ctx, l.throttled)
		}
		return l.reject(ctx, l.rated)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(eventHold, trace.WithAttributes(append(l.waitAttrs[:len(l.waitAttrs):len(l.waitAttrs)], keyWait.Float64(w.Seconds()))...))
	}
	t := time.NewTimer(w)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			cancel(time.Now(), req, tok)
			return ctx.Err()
		case <-t.C:
		}
		// A 429 that came during the wait may have moved the hold on.
		now = time.Now()
		hold = time.Duration(l.until.Load()) - now.Sub(l.epoch)
		if hold <= 0 {
			return nil
		}
		if now.Add(hold).After(limit) {
			return l.reject(ctx, l.throttled)
		}
		t.Reset(hold)
	}
}

// cancel gives back what the reservations took, as far as x/time/rate can.
func cancel(now time.Time, rs ...*rate.Reservation) {
	for _, r := range rs {
		if r != nil {
			r.CancelAt(now)
		}
	}
}

// exit feeds the hold from a throttled error of fn's that names its wait,
// and hands the error on with that wait taken off (see heldError).
func (l *Limiter) exit(err error) error {
	if err == nil || !errors.Is(err, policy.ErrThrottled) {
		return err
	}
	ra, ok := errors.AsType[retryAfterError](err)
	if !ok {
		return err
	}
	d := ra.RetryAfter()
	if d <= 0 {
		return err
	}
	if d <= maxSignal {
		l.holdFor(time.Now(), d)
	}
	return &heldError{err: err}
}

// reject records a rejection for r and calls the OnReject hook.
func (l *Limiter) reject(ctx context.Context, r *telemetry.Rejection) error {
	err := r.Record(ctx)
	if l.onReject != nil {
		l.onReject(ctx, r.Err)
	}
	return err
}

// retryAfterError is the shape of an error that names the wait its server
// asked for, as httppolicy.StatusError does.
type retryAfterError interface {
	error
	RetryAfter() time.Duration
}

// heldError is a throttled failure whose Retry-After the Limiter has taken
// into its hold: its RetryAfter reads 0, so that a retry above does not
// wait it again (it waits its own schedule, and the next attempt the rest
// of the hold). It has the failure's message, and errors.Is and errors.As
// see through it.
type heldError struct{ err error }

func (e *heldError) Error() string             { return e.err.Error() }
func (e *heldError) Unwrap() error             { return e.err }
func (e *heldError) RetryAfter() time.Duration { return 0 }

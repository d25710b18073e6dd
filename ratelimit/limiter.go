package ratelimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// eventHold is the span event of an attempt that waited to be admitted,
// with keyWait, the wait in seconds.
const eventHold = "watertight.ratelimit.hold"

var keyWait = attribute.Key("watertight.ratelimit.wait")

// Limiter admits the attempts of the calls to one dependency at the pace
// the dependency allows (see the package documentation). Build one with
// [New] and share it between every pipeline and transport that calls the
// dependency. Feed it the dependency's answers with [Limiter.Observe], as
// httppolicy.LimiterSignals does. The zero value is not usable. A Limiter
// is safe for concurrent use by multiple goroutines.
type Limiter struct {
	// epoch is the origin of the hold's end: a monotonic clock reading
	// taken at New.
	epoch time.Time
	// active mirrors end while a hold or the gate is in force, and is 0
	// otherwise: admission reads it alone, without the clock or mu, when
	// nothing is in force.
	active atomic.Int64

	mu      sync.Mutex
	end     int64         // the hold's end, in ns since epoch (0: none yet)
	gate    bool          // after the hold: admit budget attempts, then wait
	budget  int           // attempts the gate admits before the next signal
	told    bool          // a response has named a remaining count: the dependency says them
	out     int           // attempts the gate admitted that have not ended
	waiters int           // attempts waiting for the gate
	changed chan struct{} // closed (and replaced) when the gate changes
	fullAt  int64         // the latest time, in ns since epoch, an answer said the requests bucket would be full
	limit   int           // the requests limit the last answer with a count named (0: none)
	every   int64         // the gate's timed release: one more attempt every that many ns (the refill of one request)
	next    int64         // the next timed release, in ns since epoch (0: none)

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

var _ policy.Policy = (*Limiter)(nil)

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
	l.mu.Lock()
	end := l.end
	l.mu.Unlock()
	if end == 0 {
		return 0
	}
	return max(time.Duration(end)-time.Since(l.epoch), 0)
}

// openIfLeftLocked ends a step of the gate (an answer or a timed release
// changed the budget): it lets one attempt go if nothing the gate let
// through is out, opens the gate if enough is left and nobody waits, and
// wakes the waiters otherwise.
func (l *Limiter) openIfLeftLocked(now time.Time) {
	if l.budget == 0 && l.out == 0 {
		// Nothing the gate let through is out, so no exit would ever give
		// budget back: an answer to an attempt sent before the hold (or
		// one saying 0 left with a reset already past) would shut the
		// gate for good. One attempt goes, a probe, as after a hold.
		l.budget = 1
	}
	// The gate stays while the quota is low (under a tenth of its limit,
	// when the response names one) or attempts wait: each answer then lets
	// through as many as it says are left. What is left is the budget, not
	// n: the attempts the gate let through that the server has not counted
	// yet will take the rest (opening on n let a burst go onto a bucket
	// those were about to empty).
	if l.budget > 0 && l.waiters == 0 && (l.limit == 0 || l.budget >= l.limit/10) {
		l.openLocked(now)
		return
	}
	l.broadcastLocked()
}

// releaseLocked applies the gate's timed release at now: one more attempt
// for each refill interval passed since the last answer with a count (or
// since the hold ended), however long the attempts let through take to
// answer (streams, a hung probe). Up to the limit the last answer named,
// or one without a limit. It reports whether the budget grew.
func (l *Limiter) releaseLocked(now time.Time) bool {
	t := int64(now.Sub(l.epoch))
	if !l.gate || l.next == 0 || t < l.next || t < l.end {
		return false
	}
	k := (t-l.next)/l.every + 1
	l.next += k * l.every
	top := max(l.limit, 1)
	if l.budget >= top {
		return false
	}
	l.budget = int(min(int64(l.budget)+k, int64(top)))
	return true
}

// HoldFor holds every attempt for d from now, capped at Config.MaxHold,
// unless a longer hold is already set. It takes signals that come from
// elsewhere than an HTTP response, such as an SDK's error or a shared
// store. A d <= 0 or longer than a day is ignored. It is safe for
// concurrent use.
func (l *Limiter) HoldFor(d time.Duration) {
	if d > 0 && d <= maxSignal {
		l.mu.Lock()
		l.holdLocked(time.Now(), d)
		l.mu.Unlock()
	}
}

// holdLocked extends the hold to now + min(d, maxHold), never shortening
// it, and closes the gate behind it: once the hold ends, one attempt goes
// (a probe) and the others wait for what its answer says.
func (l *Limiter) holdLocked(now time.Time, d time.Duration) {
	d = max(min(d, l.maxHold), 1)
	l.end = max(l.end, int64(now.Sub(l.epoch)+d))
	l.gate = true
	l.budget = 1
	// Until an answer names a count, the timed release lets one more go
	// every hold's length after the hold: the wait the server asked for
	// one request to be possible.
	l.every = int64(d)
	l.next = l.end + l.every
	l.active.Store(max(l.end, 1))
	l.broadcastLocked()
}

// openLocked opens the gate: the quota is not known to be short.
func (l *Limiter) openLocked(now time.Time) {
	l.gate = false
	if l.end <= int64(now.Sub(l.epoch)) {
		l.active.Store(0)
	}
	l.broadcastLocked()
}

// broadcastLocked wakes the attempts waiting for the gate.
func (l *Limiter) broadcastLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// Execute runs fn once the attempt is admitted and returns fn's error.
// Without running fn, it returns a rejection (matching ErrLimited and
// policy.ErrRejected) if the wait would outlast the deadline of ctx or
// Config.MaxWait, or if a Deadline's timer ends ctx during the wait. It
// returns ctx.Err() if the caller's ctx ends during the wait. A throttled
// error of fn's with a RetryAfter feeds the hold and comes back wrapped,
// its RetryAfter reading 0 (see "No double wait"). Execute panics if ctx
// or fn is nil.
func (l *Limiter) Execute(ctx context.Context, fn policy.Func) error {
	if fn == nil {
		panic("ratelimit: nil fn")
	}
	p, err := l.Wait(ctx)
	if err != nil {
		return err
	}
	// An attempt the gate admitted must report its end even if fn panics,
	// or the attempts behind it would wait for nothing.
	finished := false
	defer func() {
		if !finished {
			p.Done(stage.ErrAborted)
		}
	}()
	err = fn(ctx)
	finished = true
	return p.Done(err)
}

// Permit is one attempt admitted by [Limiter.Wait]. Its Done must be
// called once with the attempt's outcome: an attempt the gate admitted
// holds the gate until then. The zero Permit's Done returns its argument.
type Permit struct {
	l     *Limiter
	gated bool
}

// Wait is the two-step form of Execute: it admits one attempt, waiting as
// Execute does, and returns its [Permit], or the error Execute would
// return without running fn. It panics if ctx is nil.
func (l *Limiter) Wait(ctx context.Context) (Permit, error) {
	g, err := l.enter(ctx)
	if err != nil {
		return Permit{}, err
	}
	return Permit{l: l, gated: g}, nil
}

// Done ends the attempt with its outcome err and returns err. A throttled
// err with a RetryAfter feeds the hold and comes back wrapped, its
// RetryAfter reading 0 (see "No double wait").
func (p Permit) Done(err error) error {
	if p.l == nil {
		return err
	}
	return p.l.exit(p.gated, err)
}

// enter admits one attempt, waiting if the hold, the gate or the rate asks.
// It reports whether the gate admitted it.
func (l *Limiter) enter(ctx context.Context) (gated bool, err error) {
	if ctx == nil {
		panic("ratelimit: nil Context")
	}
	active := l.active.Load() != 0
	if l.requests == nil && l.tokens == nil {
		if !active {
			return false, nil
		}
		return l.admit(ctx, time.Now(), 0, nil, nil)
	}
	now := time.Now()
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
	if !active && rateWait == 0 {
		return false, nil
	}
	return l.admit(ctx, now, rateWait, req, tok)
}

// admit waits rateWait (the client-side rate's, for which req and tok are
// reserved), then for the hold and the gate, from now; or rejects the
// attempt when that cannot end before ctx's deadline and within maxWait:
// at once if the hold and the rate say so, or when the bound is reached
// waiting for the gate.
func (l *Limiter) admit(ctx context.Context, now time.Time, rateWait time.Duration, req, tok *rate.Reservation) (gated bool, err error) {
	// limit bounds the wait for a hold (the time the server named), and
	// queueLimit the wait behind the gate (for the answers of the attempts
	// it let through), which no server named: MaxWait applies to the
	// first, MaxHold to the second, and the deadline to both. Waiting up
	// to the deadline itself would leave the attempt no time: a wait must
	// end strictly before it, as retry's must.
	// A hold met after a wait behind the gate (a new 429) is a new hold:
	// MaxWait counts from then.
	dl, hasDeadline := ctx.Deadline()
	bound := func(d time.Duration) time.Time {
		if t := now.Add(d); !hasDeadline || t.Before(dl) {
			return t
		}
		return dl.Add(-1)
	}
	limit, queueLimit := bound(l.maxWait), bound(l.maxHold)
	l.mu.Lock()
	hold := time.Duration(l.end) - now.Sub(l.epoch)
	l.mu.Unlock()
	if w := max(hold, rateWait); now.Add(w).After(limit) {
		cancel(now, req, tok)
		if rateWait > 0 && rateWait > hold {
			return false, l.reject(ctx, l.rated)
		}
		return false, l.reject(ctx, l.throttled)
	} else if w > 0 {
		l.traceWait(ctx, w)
	}
	w := sleeper{l: l, ctx: ctx}
	defer w.stop()
	if rateWait > 0 {
		if err := w.sleep(rateWait, nil, l.rated); err != nil {
			cancel(time.Now(), req, tok)
			return false, err
		}
	}
	for {
		now = time.Now()
		l.mu.Lock()
		hold = time.Duration(l.end) - now.Sub(l.epoch)
		switch {
		case hold > 0:
			// A 429 that came during the wait may have moved the hold on.
			if now.Add(hold).After(limit) {
				l.mu.Unlock()
				return false, l.reject(ctx, l.throttled)
			}
			// Asleep on the hold, the attempt waits for the gate as much
			// as one behind it: an answer that comes as the hold ends,
			// before it wakes, must not open the gate under it (all that
			// slept would go at once onto a bucket that has refilled only
			// a little).
			l.waiters++
			l.mu.Unlock()
			err := w.sleep(hold, nil, l.throttled)
			l.mu.Lock()
			l.waiters--
			l.mu.Unlock()
			if err != nil {
				return false, err
			}
			continue
		case l.releaseLocked(now) && l.limit > 0 && l.budget >= l.limit/10 && l.waiters == 0:
			// The timed release has given back a tenth of the limit, and
			// nobody waits: the gate opens, as on an answer saying so.
			l.openLocked(now)
			l.mu.Unlock()
			return false, nil
		case !l.gate:
			if l.active.Load() != 0 {
				l.active.Store(0)
			}
			l.mu.Unlock()
			return false, nil
		case l.budget > 0:
			l.budget--
			l.out++
			l.mu.Unlock()
			return true, nil
		}
		// The quota is spent: wait for the answers of the attempts out,
		// or the next timed release, as long as the bounds allow. Once
		// answers name counts, the release paces the refill, and one that
		// comes too late for the bounds is known now: reject at once, as
		// for a hold that outlasts them. Until then (the release is a
		// hold's length away), the probe's success may open the gate
		// sooner: wait for it up to the bounds.
		release := l.epoch.Add(time.Duration(l.next))
		if release.After(queueLimit) {
			if l.told || !now.Before(queueLimit) {
				l.mu.Unlock()
				return false, l.reject(ctx, l.throttled)
			}
			release = queueLimit
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		wake := l.changed
		l.waiters++
		l.mu.Unlock()
		err := w.sleep(max(release.Sub(now), 0), wake, l.throttled)
		l.mu.Lock()
		l.waiters--
		l.mu.Unlock()
		if err != nil {
			return false, err
		}
		now = time.Now()
		limit = bound(l.maxWait)
	}
}

// sleeper is the timer of one attempt's waits in admit.
type sleeper struct {
	l   *Limiter
	ctx context.Context
	t   *time.Timer
}

// sleep waits d, or until wake is closed. A wait that a Deadline's timer
// ends is the Limiter's rejection rej: fn never ran, so the call must not
// end as a timeout (the caller's own end stays ctx.Err()).
func (w *sleeper) sleep(d time.Duration, wake <-chan struct{}, rej *telemetry.Rejection) error {
	if w.t == nil {
		w.t = time.NewTimer(d)
	} else {
		w.t.Reset(d)
	}
	select {
	case <-w.ctx.Done():
		if deadline.Fired(w.ctx) {
			return w.l.reject(w.ctx, rej)
		}
		return w.ctx.Err()
	case <-wake:
		return nil
	case <-w.t.C:
		return nil
	}
}

// stop stops the timer, if any.
func (w *sleeper) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}

// traceWait adds the event of a wait of w to the span in ctx.
func (l *Limiter) traceWait(ctx context.Context, w time.Duration) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(eventHold, trace.WithAttributes(append(l.waitAttrs[:len(l.waitAttrs):len(l.waitAttrs)], keyWait.Float64(w.Seconds()))...))
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

// exit ends an attempt: one the gate admitted (gated) that ended
// without its answer saying anything lets the next attempt through (on a
// failure) or opens the gate (on a success). A throttled error of fn's
// that names its wait feeds the hold, and is handed on with that wait taken
// off (see heldError).
func (l *Limiter) exit(gated bool, err error) error {
	if gated {
		l.mu.Lock()
		l.out--
		if l.gate && l.budget == 0 {
			switch {
			case err == nil && !l.told:
				// A success, and no answer has named a count: the
				// dependency does not say (a Limiter without a Transport).
				l.openLocked(time.Now())
			case err != nil || l.out == 0:
				// A failure may have had no answer (a connection error, a
				// panic): the next attempt goes in its place. So does one
				// when nothing let through is out, or no answer would ever
				// come to let the waiters through.
				l.budget = 1
				l.broadcastLocked()
			}
			// A success once answers name counts: its own answer has
			// already said how many more may go (granting one more here
			// too let a burst of as many as had succeeded go at once onto
			// a spent bucket).
		}
		l.mu.Unlock()
	}
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
		l.HoldFor(d)
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

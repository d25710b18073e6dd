package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// The span event of an attempt that waited, with the wait in seconds.
const eventHold = "watertight.ratelimit.hold"

var keyWait = attribute.Key("watertight.ratelimit.wait")

// Limiter admits the attempts of the calls to one dependency at the pace
// the dependency allows. Create one with [New] and share it between every
// caller of the dependency. The zero value is not usable. A Limiter is safe
// for concurrent use.
type Limiter struct {
	epoch  time.Time                // the origin of the times below (monotonic)
	active atomic.Int64             // non-zero while a hold or the gate is in force
	cur    atomic.Pointer[settings] // read once by each attempt, as it enters
	upd    sync.Mutex               // serialises Update

	mu      sync.Mutex
	end     int64         // the hold's end, in ns since epoch (0: none yet)
	gate    bool          // after the hold: admit budget attempts, then wait
	budget  int           // attempts the gate admits before the next answer
	told    bool          // an answer has named a remaining count
	out     int           // attempts the gate admitted that have not ended
	waiters int           // attempts waiting for the hold or the gate
	changed chan struct{} // closed (and replaced) when the gate changes
	fullAt  int64         // the latest time an answer said the requests bucket would be full
	limit   int           // the requests limit the last counted answer named (0: none)
	every   int64         // the timed release: one more attempt every that many ns
	next    int64         // the next timed release (0: none)

	throttled *telemetry.Rejection
	rated     *telemetry.Rejection
	waitAttrs []attribute.KeyValue
	obs       telemetry.Observers
}

// settings are the settings of a Limiter from New or one Update. They
// never change: an Update stores new ones. The rate limiters are shared
// with the settings before and after, so that the tokens spent carry over.
type settings struct {
	given    Config // as given, with New's Name, Shared, MeterProvider and OnReject
	maxHold  time.Duration
	maxWait  time.Duration
	requests *rate.Limiter // nil: no RequestsPerSecond
	tokens   *rate.Limiter // nil: no TokensPerMinute
	tokenCap int
	shared   Shared // Config.Shared
}

var _ policy.Policy = (*Limiter)(nil)

// New returns a Limiter configured by cfg, or an error naming the first
// invalid field of cfg. It never panics.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	in := telemetry.NewInstruments(cfg.MeterProvider)
	rej := telemetry.Rejecter{In: in, Kind: Kind, Name: cfg.Name, OnReject: cfg.OnReject}
	l := &Limiter{
		epoch:     time.Now(),
		throttled: rej.New(ReasonThrottled, ErrLimited),
		rated:     rej.New(ReasonRate, ErrLimited),
		waitAttrs: telemetry.PolicyAttrs(Kind, cfg.Name),
	}
	l.cur.Store(newSettings(cfg, &settings{}))
	l.registerObservers(in.Meter, cfg.Name)
	return l, nil
}

// newSettings returns the settings of cfg, which is valid. A rate on in old
// too goes on with old's limiter, set to cfg's rate and burst.
func newSettings(cfg Config, old *settings) *settings {
	s := &settings{given: cfg, maxHold: cmp.Or(cfg.MaxHold, DefaultMaxHold), shared: cfg.Shared}
	s.maxWait = cmp.Or(cfg.MaxWait, s.maxHold)
	now := time.Now()
	if cfg.RequestsPerSecond > 0 {
		s.requests = retune(old.requests, now, rate.Limit(cfg.RequestsPerSecond), burst(cfg.Burst, cfg.RequestsPerSecond))
	}
	if cfg.TokensPerMinute > 0 {
		s.tokenCap = burst(cfg.TokenBurst, cfg.TokensPerMinute)
		s.tokens = retune(old.tokens, now, rate.Limit(cfg.TokensPerMinute/60), s.tokenCap)
	}
	return s
}

// retune returns lim set to limit and b from now, with the tokens it has,
// or a new full limiter if lim is nil.
func retune(lim *rate.Limiter, now time.Time, limit rate.Limit, b int) *rate.Limiter {
	if lim == nil {
		return rate.NewLimiter(limit, b)
	}
	if lim.Limit() != limit {
		lim.SetLimitAt(now, limit)
	}
	if lim.Burst() != b {
		lim.SetBurstAt(now, b)
	}
	return lim
}

// MaxWait returns Config.MaxWait after defaults.
func (l *Limiter) MaxWait() time.Duration { return l.cur.Load().maxWait }

// Held returns how much longer the hold lasts from now, or 0.
func (l *Limiter) Held() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(time.Duration(l.end)-time.Since(l.epoch), 0)
}

// openIfLeftLocked opens the gate if enough is left and nobody waits, and
// wakes the waiters otherwise.
func (l *Limiter) openIfLeftLocked(now time.Time) {
	if l.budget == 0 && l.out == 0 {
		// No exit would ever give budget back: one attempt goes, a probe.
		l.budget = 1
	}
	if l.budget > 0 && l.waiters == 0 && (l.limit == 0 || l.budget >= l.limit/10) {
		l.openLocked(now)
		return
	}
	l.broadcastLocked()
}

// releaseLocked applies the gate's timed release at now, up to the limit
// the last answer named (or 1). It reports whether the budget grew.
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
// unless a longer hold is already set. A d <= 0 or longer than a day is
// ignored.
func (l *Limiter) HoldFor(d time.Duration) {
	if d > 0 && d <= maxSignal {
		l.Observe(Answer{Hold: d})
	}
}

// holdLocked extends the hold to now + d, which the caller has capped at
// MaxHold, and closes the gate behind it.
func (l *Limiter) holdLocked(now time.Time, d time.Duration) {
	d = max(d, 1)
	l.end = max(l.end, int64(now.Sub(l.epoch)+d))
	l.gate = true
	l.budget = 1
	l.every = int64(d)
	l.next = l.end + l.every
	l.active.Store(max(l.end, 1))
	l.broadcastLocked()
}

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

// Execute runs fn once the attempt is admitted and returns fn's error, or
// a rejection or ctx.Err() without running fn. A throttled error is
// wrapped (see "No double wait"). Execute panics if ctx or fn is nil.
func (l *Limiter) Execute(ctx context.Context, fn policy.Func) (err error) {
	if fn == nil {
		panic("ratelimit: nil fn")
	}
	p, err := l.Wait(ctx)
	if err != nil {
		return err
	}
	// A panic must end the attempt too, or the gate would wait for nothing.
	err = policy.ErrAborted
	defer func() { err = p.Done(err) }()
	return fn(p.Begin(ctx))
}

// Permit is one attempt admitted by [Limiter.Wait]. Call its Done with the
// attempt's outcome. Done makes a Permit zero, and the zero Permit's Done
// returns its argument: a second Done of the same Permit does nothing. A
// copy is the same attempt, so end only one of them.
type Permit struct {
	l     *Limiter
	gated bool
	t     *ticket // the shared quota's, or nil
}

// Wait is the two-step form of Execute: it admits one attempt as Execute
// does, and returns its [Permit]. Run the attempt with [Permit.Begin]'s
// ctx, so that [ReportUsage] reaches a shared quota. It panics if ctx is
// nil.
func (l *Limiter) Wait(ctx context.Context) (Permit, error) {
	if ctx == nil {
		panic("ratelimit: nil Context")
	}
	s := l.cur.Load()
	active := l.active.Load() != 0
	if s.shared != nil {
		return l.share(ctx, s, active)
	}
	if !active && s.requests == nil && s.tokens == nil {
		return Permit{l: l}, nil
	}
	return l.reserve(ctx, s, active)
}

// reserve is Wait past its fast path: it reserves the attempt from the
// rates of s, the settings the attempt read, then admits it.
func (l *Limiter) reserve(ctx context.Context, s *settings, active bool) (Permit, error) {
	now := time.Now()
	var req, tok *rate.Reservation
	var rateWait time.Duration
	if s.requests != nil {
		req = s.requests.ReserveN(now, 1)
		rateWait = req.DelayFrom(now)
	}
	if s.tokens != nil {
		tok = s.tokens.ReserveN(now, min(Cost(ctx), s.tokenCap))
		if !tok.OK() {
			// An Update lowered TokenBurst since s was read: draw the new one.
			tok = s.tokens.ReserveN(now, min(Cost(ctx), s.tokens.Burst()))
		}
		rateWait = max(rateWait, tok.DelayFrom(now))
	}
	if !active && rateWait == 0 {
		return Permit{l: l}, nil
	}
	g, err := l.admit(ctx, s, now, rateWait, req, tok)
	if err != nil {
		return Permit{}, err
	}
	return Permit{l: l, gated: g}, nil
}

// Done ends the attempt with its outcome err and returns err, wrapped as
// Execute does.
func (p *Permit) Done(err error) error {
	l, gated, t := p.l, p.gated, p.t
	if l == nil {
		return err
	}
	*p = Permit{}
	if t != nil {
		t.settle(err)
	}
	return l.exit(gated, err)
}

// admit waits rateWait (the rate's, for which req and tok are reserved),
// then for the hold and the gate, and reports whether the gate admitted
// the attempt. A wait is bounded by ctx's deadline, and by s's maxWait for
// a hold and the rate, s's maxHold behind the gate.
func (l *Limiter) admit(ctx context.Context, s *settings, now time.Time, rateWait time.Duration, req, tok *rate.Reservation) (gated bool, err error) {
	limit, queueLimit, holdEnd := waitBound(ctx, now, s.maxWait), waitBound(ctx, now, s.maxHold), now.Add(s.maxHold)
	hold := l.Held()
	if w := max(hold, rateWait); now.Add(w).After(limit) {
		cancel(now, req, tok)
		if rateWait > 0 && rateWait > hold {
			return false, l.rated.Record(ctx)
		}
		return false, l.throttled.Record(ctx)
	} else if span := trace.SpanFromContext(ctx); w > 0 && span.IsRecording() {
		attrs := append(l.waitAttrs[:len(l.waitAttrs):len(l.waitAttrs)], keyWait.Float64(w.Seconds()))
		span.AddEvent(eventHold, trace.WithAttributes(attrs...))
	}
	if err := l.sleep(ctx, rateWait, nil, l.rated); err != nil {
		cancel(time.Now(), req, tok)
		return false, err
	}
	for {
		now = time.Now()
		l.mu.Lock()
		d, wake, rej := l.stepLocked(now, limit, queueLimit, holdEnd)
		if d < 0 || rej != nil {
			l.mu.Unlock()
			if rej != nil {
				return false, rej.Record(ctx)
			}
			return d == gatedStep, nil
		}
		// An attempt asleep on the hold waits for the gate too.
		l.waiters++
		l.mu.Unlock()
		err := l.sleep(ctx, d, wake, l.throttled)
		l.mu.Lock()
		l.waiters--
		l.mu.Unlock()
		if err != nil {
			return false, err
		}
		if wake != nil {
			// A hold met after the gate is a new hold: MaxWait counts afresh.
			limit = waitBound(ctx, time.Now(), s.maxWait)
		}
	}
}

// The steps stepLocked returns that admit the attempt.
const (
	gatedStep = -1
	openStep  = -2
)

// stepLocked admits the attempt (openStep, gatedStep), returns the
// rejection it ends with (recorded by the caller once l.mu is released), or
// returns how long to wait and what may end the wait early. A wait known
// to pass queueLimit (the deadline or MaxHold) is rejected at once; a wait
// behind the gate for answers lasts until holdEnd (MaxHold), unless ctx
// ends first. l.mu is held.
func (l *Limiter) stepLocked(now, limit, queueLimit, holdEnd time.Time) (time.Duration, <-chan struct{}, *telemetry.Rejection) {
	if hold := time.Duration(l.end) - now.Sub(l.epoch); hold > 0 {
		// A 429 that came during the wait may have moved the hold on.
		if now.Add(hold).After(limit) {
			return 0, nil, l.throttled
		}
		return hold, nil, nil
	}
	// The timed release may have given back a tenth of the limit.
	if l.releaseLocked(now) && l.limit > 0 && l.budget >= l.limit/10 && l.waiters == 0 || !l.gate {
		l.openLocked(now)
		return openStep, nil, nil
	}
	if l.budget > 0 {
		l.budget--
		l.out++
		return gatedStep, nil, nil
	}
	// Wait for the answers of the attempts out, or the next timed release.
	// Until answers name counts, a success may open the gate sooner.
	release := l.epoch.Add(time.Duration(l.next))
	if release.After(queueLimit) {
		if l.told || !now.Before(holdEnd) {
			return 0, nil, l.throttled
		}
		// An answer may open the gate sooner. Waking just before the
		// deadline to reject would race the Deadline's timer: let ctx end
		// the wait instead.
		release = holdEnd
	}
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return max(release.Sub(now), 0), l.changed, nil
}

// sleep waits d, or until wake is closed, or until ctx ends.
// A wait that wakes at or past ctx's deadline ends as if ctx had ended it:
// no attempt is admitted at its deadline.
func (l *Limiter) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}, rej *telemetry.Rejection) error {
	if d <= 0 && wake == nil {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-wake:
	case <-t.C:
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		<-ctx.Done() // its timer is due: let it end ctx, then read why
	}
	if ctx.Err() == nil {
		return nil
	}
	// A Deadline's timer refuses the wait, as fn never ran; but after a
	// retry's attempt that ran fn, the call is the Deadline's timeout.
	if stage.WaitRefused(ctx) {
		return rej.Record(ctx)
	}
	return ctx.Err()
}

// cancel gives back what the reservations took, as far as x/time/rate can.
func cancel(now time.Time, rs ...*rate.Reservation) {
	for _, r := range rs {
		if r != nil {
			r.CancelAt(now)
		}
	}
}

// exit ends an attempt, which the gate admitted if gated. A throttled err
// that names its wait feeds the hold, and is handed on as a heldError.
func (l *Limiter) exit(gated bool, err error) error {
	if gated {
		l.mu.Lock()
		l.out--
		if l.gate && l.budget == 0 {
			switch {
			case err == nil && !l.told:
				// No answer has named a count: the dependency does not say.
				l.openLocked(time.Now())
			case err != nil || l.out == 0:
				// A failure may have had no answer: the next attempt goes.
				// So does one when nothing let through is out.
				l.budget = 1
				l.broadcastLocked()
			}
			// A success's own answer has said how many more may go.
		}
		l.mu.Unlock()
	}
	ra, ok := errors.AsType[retryAfterError](err)
	if !ok || ra.RetryAfter() <= 0 || !errors.Is(err, policy.ErrThrottled) {
		return err
	}
	l.HoldFor(ra.RetryAfter())
	return &heldError{err: err}
}

// retryAfterError is an error that names the wait its server asked for.
type retryAfterError interface {
	error
	RetryAfter() time.Duration
}

// heldError is a throttled failure whose Retry-After the Limiter has taken
// into its hold: its RetryAfter reads 0, so a retry does not wait it again.
type heldError struct{ err error }

func (e *heldError) Error() string             { return e.err.Error() }
func (e *heldError) Unwrap() error             { return e.err }
func (e *heldError) RetryAfter() time.Duration { return 0 }

package breaker

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// Kind is the watertight.policy.kind of every Breaker, and the Kind of its
// [policy.RejectedError]s.
const Kind = "breaker"

// machine is one gobreaker state machine, driven in two steps (Allow, then
// the done func it returns) for every call, and what the Breaker knows of
// it. A machine lives one period: the Breaker's first one and each that
// Reset or a closing half-open period makes are closed; each open period,
// whatever opened it (a trip, a failed probe, OpenUntil), is a machine of
// its own, tripped before it is published, which the Breaker holds open
// until until and gobreaker then answers for, half-open. When a period ends,
// its machine's OnStateChange publishes the next one (see changed).
type machine struct {
	*gobreaker.TwoStepCircuitBreaker[struct{}]
	open  bool        // an open period: open until until, then half-open
	until int64       // when open, the end of the open period, Unix ns by time.Now
	fast  atomic.Bool // until is surely ahead: Allow rejects without reading the clock
	held  bool        // opened by OpenUntil or under a gate: probes ask the gate, Counts are zero
	// epoch is the same for the machines that follow one another, and new
	// at Reset and OpenUntil: the outcome of a call admitted before them
	// says nothing to the machines after.
	epoch uint64
}

// Breaker is a circuit breaker: it stops calling a dependency that keeps
// failing, and tries it again after a while. Build one with [New]; the zero
// value is not usable. A Breaker is safe for concurrent use by multiple
// goroutines.
type Breaker struct {
	settings    gobreaker.Settings // template for every machine, less OnStateChange
	openTimeout time.Duration

	isFailure func(error) bool // Config.IsFailure, or DefaultIsFailure
	throttled bool             // the default classification: a throttled error is excluded

	cb     atomic.Pointer[machine]                    // the current machine; written under mu
	forced atomic.Bool                                // ForceOpen until Reset; written under mu
	queued atomic.Bool                                // pending is not empty (maybe); written under mu
	gate   atomic.Pointer[func(context.Context) bool] // GateProbes' gate, or nil
	epochs atomic.Uint64                              // the last machine.epoch

	// mu guards pending, last and draining, and the writes of cb, forced
	// and queued. It is taken inside gobreaker's lock (from its
	// OnStateChange), never around a call into gobreaker.
	mu       sync.Mutex
	pending  []transition // changes not yet reported, oldest first
	last     State        // the state of the newest change queued
	draining bool         // a goroutine is reporting pending

	rejOpen, rejFull *telemetry.Rejection
	onReject         func(context.Context, *policy.RejectedError)
	onStateChange    func(from, to State)
	tel              recorder

	closeOnce sync.Once
	reg       metric.Registration
}

// transition is one state change waiting to be reported.
type transition struct{ from, to State }

// New returns a Breaker configured by cfg, or an error naming the first
// invalid field of cfg. It never panics. Call [Breaker.Close] when done with
// the Breaker: its MeterProvider holds it until then.
func New(cfg Config) (*Breaker, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	in := telemetry.NewInstruments(cfg.MeterProvider)
	b := &Breaker{
		settings:      r.settings(cfg.Name),
		isFailure:     r.isFailure,
		throttled:     r.throttled,
		rejOpen:       telemetry.NewRejection(in, Kind, cfg.Name, ReasonOpen, ErrOpen),
		rejFull:       telemetry.NewRejection(in, Kind, cfg.Name, ReasonHalfOpenFull, ErrOpen),
		onReject:      cfg.OnReject,
		onStateChange: cfg.OnStateChange,
		tel:           newRecorder(in, cfg.Name),
		openTimeout:   r.openTimeout,
	}
	b.cb.Store(b.newMachine(false, false))
	b.reg = b.tel.registerGauge(in.Meter, b.State)
	return b, nil
}

// newMachine returns a fresh machine, not yet published: closed, or, if
// open, tripped (gobreaker turns it half-open 1 ns later, but the Breaker
// does not ask it before until, which the caller sets).
func (b *Breaker) newMachine(open, held bool) *machine {
	m := &machine{open: open, held: held}
	st := b.settings
	st.OnStateChange = func(_ string, _, to gobreaker.State) { b.changed(m, State(to)) }
	if open {
		st.ReadyToTrip = func(gobreaker.Counts) bool { return true }
	}
	m.TwoStepCircuitBreaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](st)
	if open {
		done, _ := m.Allow()
		done(errFailed)
	}
	return m
}

// maxFastMargin caps the margin before until at which m.fast is cleared: a
// tenth of the open period, at most this.
const maxFastMargin = 100 * time.Millisecond

// holdUntil sets the end of open machine m's period, before m is
// published. Reading the clock costs more than the rest of a rejection, so
// m.fast is set, and a timer clears it a margin before until: the last
// stretch is timed by the clock, and the flag never makes the period
// longer unless the timer runs later than the margin.
func (m *machine) holdUntil(until int64) {
	m.until = until
	d := time.Duration(until - time.Now().UnixNano())
	if margin := min(d/10, maxFastMargin); margin > 0 {
		m.fast.Store(true)
		time.AfterFunc(d-margin, func() { m.fast.Store(false) })
	}
}

// changed is the OnStateChange of machine m, called under its lock: when
// m is the current machine and the breaker is not forced open, it
// publishes the next machine if m's period has ended (a trip or a failed
// probe opens a new period, for OpenTimeout; successful probes close the
// breaker, with fresh counts) and queues the change (see doc.go). The
// changes of a machine not yet published (an open period's own trip) or
// already replaced are ignored.
func (b *Breaker) changed(m *machine, to State) {
	if b.cb.Load() != m {
		return
	}
	var next *machine
	switch to {
	case Open:
		next = b.newMachine(true, m.held || b.gate.Load() != nil)
		now := time.Now().UnixNano()
		until := now + int64(b.openTimeout)
		if until < now {
			until = math.MaxInt64 // past what UnixNano holds: for good
		}
		next.holdUntil(until)
	case Closed:
		next = b.newMachine(false, false)
	}
	if next != nil {
		next.epoch = m.epoch
	}
	b.mu.Lock()
	if b.cb.Load() == m && !b.forced.Load() {
		if next != nil {
			b.cb.Store(next)
		}
		b.queue(to)
	}
	b.mu.Unlock()
}

// Execute runs fn if the breaker lets the call through, and returns fn's
// error unchanged; otherwise it returns a rejection matching [ErrOpen] and
// [policy.ErrRejected] without calling fn. If fn panics or calls
// runtime.Goexit, the call counts as a failure and the panic goes on. It
// panics if ctx or fn is nil.
func (b *Breaker) Execute(ctx context.Context, fn policy.Func) error {
	if fn == nil {
		panic("breaker: nil fn")
	}
	p, err := b.Allow(ctx)
	if err != nil {
		return err
	}
	// A panic or runtime.Goexit in fn is reported as a failure from a
	// deferred call that recovers nothing, so a half-open breaker is never
	// left waiting for a probe's outcome.
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

// Permit is a call the [Breaker] let through, returned by [Breaker.Allow].
// Its Done must be called exactly once with the call's outcome: a permit
// never done holds a half-open probe's place for good. The zero Permit's
// Done returns its argument and reports nothing.
type Permit struct {
	b    *Breaker
	ctx  context.Context // Allow's: its end decides whether the caller left
	m    *machine        // the machine that admitted the call
	done func(error)     // m's
}

// Allow asks the breaker to let one call through. It returns a [Permit]
// for the call's outcome, or a rejection (errors.Is [ErrOpen] and
// policy.ErrRejected) and the zero Permit. Allow is the two-step form of
// Execute, for a call that outlives a function (a stream, a websocket).
// It does not allocate on a rejection. It panics if ctx is nil.
func (b *Breaker) Allow(ctx context.Context) (Permit, error) {
	if ctx == nil {
		panic("breaker: nil Context")
	}
	for {
		if b.forced.Load() {
			return Permit{}, b.reject(ctx, b.rejOpen)
		}
		m := b.cb.Load()
		if m.open {
			if m.fast.Load() || time.Now().UnixNano() < m.until {
				return Permit{}, b.reject(ctx, b.rejOpen)
			}
			if g := b.gate.Load(); m.held && g != nil && !(*g)(ctx) {
				return Permit{}, b.reject(ctx, b.rejFull)
			}
		}
		done, err := m.Allow()
		if b.cb.Load() != m {
			// m's period ended meanwhile: its answer is stale (a machine
			// that failed a probe is half-open 1 ns later), so ask the
			// current machine.
			if done != nil {
				done(errNotRun)
			}
			continue
		}
		if b.queued.Load() {
			b.flushAdmitted(ctx, done)
		}
		if err != nil {
			return Permit{}, b.rejectRefused(ctx, err)
		}
		return Permit{b: b, ctx: ctx, m: m, done: done}, nil
	}
}

// Done reports the outcome err of the permitted call and returns err
// unchanged. How err counts is the Outcomes table of the package
// documentation; it is judged with the context given to Allow, so a call
// whose caller's context ended first is excluded.
func (p Permit) Done(err error) error {
	if p.b == nil {
		return err
	}
	p.b.report(p.ctx, p.done, err)
	if m := p.b.cb.Load(); m != p.m && m.epoch == p.m.epoch {
		// Reported to a machine whose period has ended: move the
		// current one to now, as reporting to it would have.
		p.b.current(p.ctx)
	}
	if p.b.queued.Load() {
		p.b.flush(p.ctx)
	}
	return err
}

// rejectRefused records the rejection of a call gobreaker refused with err
// (ErrOpenState or ErrTooManyRequests) and calls OnReject.
func (b *Breaker) rejectRefused(ctx context.Context, err error) error {
	if err == gobreaker.ErrTooManyRequests {
		return b.reject(ctx, b.rejFull)
	}
	return b.reject(ctx, b.rejOpen)
}

// reject records a rejection and calls OnReject.
func (b *Breaker) reject(ctx context.Context, r *telemetry.Rejection) error {
	err := r.Record(ctx)
	if b.onReject != nil {
		b.onReject(ctx, r.Err)
	}
	return err
}

// State returns the breaker's state now. An open breaker whose OpenTimeout
// has passed is reported half-open, even if no call has come since.
func (b *Breaker) State() State {
	_, s := b.current(context.Background())
	return s
}

// current returns the current machine, nil if the breaker is forced open,
// and the breaker's state, bringing the machine up to now. It reports the
// changes that causes, with ctx.
func (b *Breaker) current(ctx context.Context) (*machine, State) {
	for {
		if b.forced.Load() {
			return nil, Open
		}
		m := b.cb.Load()
		if m.open && time.Now().UnixNano() < m.until {
			return m, Open
		}
		s := State(m.State())
		if b.queued.Load() {
			b.flush(ctx)
		}
		if b.cb.Load() == m { // else m's answer is stale: ask again
			return m, s
		}
	}
}

// Counts returns the breaker's counts now: see [Counts] for what they
// cover. Like [Breaker.State], it first brings the breaker up to now, and
// may report the changes of state that causes. An open breaker whose
// OpenTimeout has passed turns half-open, with counts of zero. A closed
// one's rolling window drops the buckets that aged out. Every count is
// zero while the breaker is open, by its rules or by [Breaker.ForceOpen].
// So are they, open or half-open, while [Breaker.OpenUntil] or a gated
// trip holds it. The counts are read together, so they agree with each
// other. Counts is safe for concurrent use; a call running beside it may
// or may not be in them.
func (b *Breaker) Counts() Counts {
	m, _ := b.current(context.Background())
	if m == nil || m.held {
		return Counts{}
	}
	// gobreaker's Counts reads the counts as they stood after the last
	// call into the machine; current has moved it to now.
	c := m.TwoStepCircuitBreaker.Counts()
	return Counts{
		Requests:             c.Requests,
		TotalSuccesses:       c.TotalSuccesses,
		TotalFailures:        c.TotalFailures,
		TotalExclusions:      c.TotalExclusions,
		ConsecutiveSuccesses: c.ConsecutiveSuccesses,
		ConsecutiveFailures:  c.ConsecutiveFailures,
	}
}

// ForceOpen opens the breaker by hand: every call is rejected, with reason
// "open", until [Breaker.Reset]. Calling it again changes nothing.
func (b *Breaker) ForceOpen() {
	b.mu.Lock()
	if !b.forced.Load() {
		b.forced.Store(true)
		b.queue(Open)
	}
	b.mu.Unlock()
	b.flush(context.Background())
}

// Reset closes the breaker by hand, with fresh counts, and ends
// [Breaker.ForceOpen]. The outcomes of calls admitted before Reset and still
// running are not counted.
func (b *Breaker) Reset() {
	m := b.newMachine(false, false)
	m.epoch = b.epochs.Add(1)
	b.mu.Lock()
	b.cb.Store(m)
	b.forced.Store(false)
	b.queue(Closed)
	b.mu.Unlock()
	b.flush(context.Background())
}

// OpenUntil opens the breaker until t, on this process's clock: every call
// is rejected with reason "open" until then. From t the breaker is
// half-open, as after its own OpenTimeout: it lets [Config.HalfOpenRequests]
// probes through (asking the gate first, if [Breaker.GateProbes] set one),
// closes with fresh counts once that many have succeeded, and opens again
// for OpenTimeout on a failed probe. A t already past starts the half-open
// period at once. A later OpenUntil replaces an earlier one, probes in
// flight included (their outcomes are then ignored); [Breaker.Reset] ends
// it; [Breaker.ForceOpen] takes precedence over it until Reset. Changes
// are reported (telemetry, OnStateChange) as usual, from the calling
// goroutine. It is safe for concurrent use.
//
// It is the API a breaker shared by several replicas uses to apply an open
// decided elsewhere (package redisstate in its own module).
func (b *Breaker) OpenUntil(t time.Time) {
	m := b.newMachine(true, true)
	m.holdUntil(t.UnixNano())
	m.epoch = b.epochs.Add(1)
	to := Open
	if time.Now().UnixNano() >= m.until {
		// Half-open at once: gobreaker turns the machine half-open
		// strictly after its 1 ns timeout, so wait for that if the clock
		// has not moved since the trip (a fake clock).
		to = HalfOpen
		for m.State() == gobreaker.StateOpen {
			time.Sleep(time.Nanosecond)
		}
	}
	b.mu.Lock()
	b.cb.Store(m)
	if !b.forced.Load() {
		b.queue(to)
	}
	b.mu.Unlock()
	b.flush(context.Background())
}

// GateProbes sets gate, which a half-open breaker asks, on the caller's
// goroutine and outside every lock, before it admits each probe: if gate
// returns false, the call is rejected with reason "half_open_full" and
// takes no probe's place. With a gate set, the breaker's own trips open it
// as [Breaker.OpenUntil] does (for OpenTimeout), so that every half-open
// period asks the gate; a trip already in force is not affected. A nil
// gate removes it. gate must be quick and safe for concurrent use; it may
// call the Breaker's State and Counts. GateProbes is safe for concurrent
// use.
//
// A breaker shared by several replicas sets a gate so that only the
// replica holding a probe lease probes: with gobreaker's own timer, every
// replica would turn half-open and probe at once.
func (b *Breaker) GateProbes(gate func(ctx context.Context) bool) {
	if gate == nil {
		b.gate.Store(nil)
		return
	}
	b.gate.Store(&gate)
}

// Close unregisters the watertight.breaker.state gauge. It always returns
// nil and may be called more than once; the Breaker goes on working without
// the gauge.
func (b *Breaker) Close() error {
	b.closeOnce.Do(func() {
		if b.reg != nil {
			if err := b.reg.Unregister(); err != nil {
				otel.Handle(err)
			}
		}
	})
	return nil
}

package breaker

import (
	"context"
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

// machine is the gobreaker state machine a Breaker drives, in two steps
// (Allow, then the done func it returns) for every call.
type machine = gobreaker.TwoStepCircuitBreaker[struct{}]

// Breaker is a circuit breaker: it stops calling a dependency that keeps
// failing, and tries it again after a while. Build one with [New]; the zero
// value is not usable. A Breaker is safe for concurrent use by multiple
// goroutines.
type Breaker struct {
	settings gobreaker.Settings // template for every machine, less OnStateChange

	isFailure func(error) bool // Config.IsFailure, or DefaultIsFailure
	throttled bool             // the default classification: a throttled error is excluded

	cb       atomic.Pointer[machine] // the current machine; Reset swaps in a new one
	forced   atomic.Bool             // ForceOpen until Reset; written under mu
	openFast atomic.Bool             // the machine is open and will be for a while; written under mu
	queued   atomic.Bool             // pending is not empty (maybe); written under mu
	fastFor  time.Duration           // how long openFast stays set after opening; 0: never set

	// mu guards pending, last, draining and openGen, and the writes of cb,
	// forced, openFast and queued. It is taken inside gobreaker's lock (from
	// its OnStateChange), never around a call into gobreaker.
	mu       sync.Mutex
	pending  []transition // changes not yet reported, oldest first
	last     State        // the state of the newest change queued
	draining bool         // a goroutine is reporting pending
	openGen  uint64       // bumped whenever openFast is set or cleared
	hold     hold         // OpenUntil and GateProbes (remote.go); its fields but on under mu

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
		fastFor:       fastOpenFor(r.openTimeout),
	}
	b.cb.Store(b.newMachine())
	b.reg = b.tel.registerGauge(in.Meter, b.State)
	return b, nil
}

// newMachine returns a fresh closed gobreaker whose state changes are queued
// for as long as it is b's current machine and b is not forced open.
func (b *Breaker) newMachine() *machine {
	var m *machine
	st := b.settings
	// Called under the machine's lock: it only queues the change (see
	// doc.go). m is set before the machine is published in b.cb, and so
	// before any call into it can change its state.
	st.OnStateChange = func(_ string, _, to gobreaker.State) {
		b.mu.Lock()
		if b.cb.Load() == m && !b.forced.Load() && !b.hold.on.Load() && !b.holdTrip(State(to)) {
			b.setOpenFast(State(to) == Open)
			b.queue(State(to))
		}
		b.mu.Unlock()
	}
	m = gobreaker.NewTwoStepCircuitBreaker[struct{}](st)
	return m
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
	b     *Breaker
	ctx   context.Context // Allow's: its end decides whether the caller left
	done  func(error)     // gobreaker's, or nil
	probe *heldProbe      // a probe admitted during a hold, or nil
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
	if b.forced.Load() || b.openFast.Load() || b.hold.on.Load() {
		if !b.forced.Load() && b.hold.on.Load() {
			return b.allowHeld(ctx)
		}
		return Permit{}, b.reject(ctx, b.rejOpen)
	}
	done, err := b.cb.Load().Allow()
	if b.queued.Load() {
		b.flushAdmitted(ctx, done)
	}
	if err != nil {
		return Permit{}, b.rejectRefused(ctx, err)
	}
	return Permit{b: b, ctx: ctx, done: done}, nil
}

// Done reports the outcome err of the permitted call and returns err
// unchanged. How err counts is the Outcomes table of the package
// documentation; it is judged with the context given to Allow, so a call
// whose caller's context ended first is excluded.
func (p Permit) Done(err error) error {
	if p.b == nil {
		return err
	}
	p.b.report(p.ctx, p, err)
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
	if b.forced.Load() {
		return Open
	}
	if s, ok := b.heldState(); ok {
		return s
	}
	s := State(b.cb.Load().State())
	if b.queued.Load() {
		b.flush(context.Background())
	}
	return s
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
	if b.forced.Load() || b.hold.on.Load() {
		return Counts{}
	}
	m := b.cb.Load()
	// gobreaker's Counts reads the counts as they stood after the last
	// call into the machine; its State first moves the machine to now.
	m.State()
	c := m.Counts()
	if b.queued.Load() {
		b.flush(context.Background())
	}
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
	m := b.newMachine()
	b.mu.Lock()
	b.cb.Store(m)
	b.forced.Store(false)
	b.endHold()
	b.setOpenFast(false)
	b.queue(Closed)
	b.mu.Unlock()
	b.flush(context.Background())
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

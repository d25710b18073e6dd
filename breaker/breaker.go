package breaker

import (
	"cmp"
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// Kind is the watertight.policy.kind and RejectedError.Kind of a Breaker.
const Kind = "breaker"

// machine is the gobreaker state machine of one period. Each open period
// has its own, tripped before it is published and held open until until.
// When a period ends, its OnStateChange publishes the next (see changed).
type machine struct {
	*gobreaker.TwoStepCircuitBreaker[struct{}]
	open  bool        // an open period: open until until, then half-open
	until int64       // Unix ns
	held  bool        // by OpenUntil or a gate: probes ask the gate, Counts are zero
	slow  *slowCounts // closed, with a slow rule: its slow calls
	// epoch changes at Reset and OpenUntil: outcomes of calls admitted
	// before count for no later machine.
	epoch uint64
}

// Breaker is a circuit breaker. Build one with [New]; the zero value is not
// usable. A Breaker is safe for concurrent use.
type Breaker struct {
	rules     atomic.Pointer[rules]       // the settings in force; written under update
	update    sync.Mutex                  // serialises Update; calls never take it
	trip      func(gobreaker.Counts) bool // every closed machine's ReadyToTrip: the rules in force
	isFailure func(error) bool
	throttled bool       // IsFailure is the default: exclude a throttled error
	slow      *slowWatch // nil without a slow rule

	cb     atomic.Pointer[machine] // the current machine; written under mu
	forced atomic.Bool             // ForceOpen until Reset; written under mu
	queued atomic.Bool             // pending may not be empty; written under mu
	gate   atomic.Pointer[func(context.Context) bool]
	epochs atomic.Uint64

	// mu guards pending, last and draining. It is taken inside gobreaker's
	// lock, never around a call into gobreaker.
	mu       sync.Mutex
	pending  []transition // changes not yet reported, oldest first
	last     State        // the state of the newest change queued
	draining bool         // a goroutine is reporting pending

	rejOpen, rejFull *telemetry.Rejection
	onStateChange    func(from, to State)
	tel              recorder
	obs              telemetry.Observers
}

type transition struct{ from, to State }

// New returns a Breaker configured by cfg, or an error naming the first
// invalid field of cfg. Call [Breaker.Close] when done with it.
func New(cfg Config) (*Breaker, error) {
	r, err := newRules(cfg)
	if err != nil {
		return nil, err
	}
	isFailure := cfg.IsFailure
	if isFailure == nil {
		isFailure = DefaultIsFailure
	}
	in := telemetry.NewInstruments(cfg.MeterProvider)
	rej := telemetry.Rejecter{In: in, Kind: Kind, Name: cfg.Name, OnReject: cfg.OnReject}
	b := &Breaker{
		isFailure:     isFailure,
		throttled:     cfg.IsFailure == nil,
		rejOpen:       rej.New(ReasonOpen, ErrOpen),
		rejFull:       rej.New(ReasonHalfOpenFull, ErrOpen),
		onStateChange: cfg.OnStateChange,
		tel:           newRecorder(in, cfg.Name),
	}
	b.rules.Store(r)
	b.trip = func(c gobreaker.Counts) bool { return b.rules.Load().st.ReadyToTrip(c) }
	if cfg.SlowCallRatio > 0 {
		b.slow = &slowWatch{b: b, d: cfg.SlowCallDuration, ratio: cfg.SlowCallRatio,
			min: cmp.Or(cfg.SlowCallMinCalls, DefaultMinRequests), base: time.Now(), head: 1}
		b.tel.slowCalls = telemetry.Counter(in.Meter, telemetry.MetricSlow, "{call}", "Calls a circuit breaker judged slow.")
	}
	b.cb.Store(b.newMachine(false, false))
	b.tel.registerGauge(in.Meter, &b.obs, b.State)
	return b, nil
}

// newMachine returns a fresh, unpublished machine: closed, or tripped if
// open (the caller sets until).
func (b *Breaker) newMachine(open, held bool) *machine {
	m := &machine{open: open, held: held}
	// The window and the probes are fixed per machine; the trip rules are
	// read when gobreaker judges a failure, so an Update applies them at once.
	st := b.rules.Load().st
	if b.slow != nil && !open {
		m.slow = newSlowCounts(time.Since(b.slow.base), st.BucketPeriod, int(st.Interval/st.BucketPeriod))
	}
	st.OnStateChange = func(_ string, _, to gobreaker.State) { b.changed(m, State(to)) }
	st.ReadyToTrip = b.trip
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

// changed is machine m's OnStateChange, called under its lock. If m is
// current and the breaker is not forced open, it publishes the next
// machine when m's period has ended, and queues the change.
func (b *Breaker) changed(m *machine, to State) {
	if b.cb.Load() != m {
		return // not yet published, or replaced
	}
	var next *machine
	switch to {
	case Open:
		next = b.newMachine(true, m.held || b.gate.Load() != nil)
		now := time.Now().UnixNano()
		until := now + int64(b.rules.Load().openTimeout)
		if until < now {
			until = math.MaxInt64
		}
		next.until = until
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
// error unchanged. Otherwise it returns a rejection matching [ErrOpen]
// without calling fn. It panics if ctx or fn is nil.
func (b *Breaker) Execute(ctx context.Context, fn policy.Func) (err error) {
	if fn == nil {
		panic("breaker: nil fn")
	}
	p, err := b.Allow(ctx)
	if err != nil {
		return err
	}
	err = policy.ErrAborted // if fn panics or calls runtime.Goexit
	defer func() { err = p.Done(err) }()
	return fn(ctx)
}

// Permit is a call the [Breaker] let through. Its Done must be called: a
// permit never done holds a half-open probe's place for good. Done makes a
// Permit zero, and the zero Permit's Done returns its argument and reports
// nothing: a second Done of the same Permit counts nothing. A copy is the
// same call, so end only one of them.
type Permit struct {
	b    *Breaker
	ctx  context.Context
	m    *machine // the machine that admitted the call
	done func(error)
	seq  uint64 // the call's number in the slow rule's watch; 0: not timed
}

// Allow is the two-step form of Execute, for a call that outlives a
// function (a stream). It returns a [Permit], or a rejection matching
// [ErrOpen] and the zero Permit. It panics if ctx is nil.
func (b *Breaker) Allow(ctx context.Context) (Permit, error) {
	if ctx == nil {
		panic("breaker: nil Context")
	}
	for {
		if b.forced.Load() {
			return Permit{}, b.rejOpen.Record(ctx)
		}
		m := b.cb.Load()
		if m.open {
			if time.Now().UnixNano() < m.until {
				return Permit{}, b.rejOpen.Record(ctx)
			}
			if g := b.gate.Load(); m.held && g != nil && !(*g)(ctx) {
				return Permit{}, b.rejFull.Record(ctx)
			}
		}
		done, err := m.Allow()
		if b.cb.Load() != m {
			// m's period ended meanwhile: ask the current machine.
			if done != nil {
				done(errNotRun)
			}
			continue
		}
		if b.queued.Load() {
			b.flushAdmitted(ctx, done)
		}
		switch err {
		case nil:
			p := Permit{b: b, ctx: ctx, m: m, done: done}
			if b.slow != nil {
				p.seq = b.slow.admit(m)
			}
			return p, nil
		case gobreaker.ErrTooManyRequests:
			return Permit{}, b.rejFull.Record(ctx)
		}
		return Permit{}, b.rejOpen.Record(ctx)
	}
}

// Done reports the outcome err of the call, makes p zero, and returns err
// unchanged. err counts as the package's Outcomes table says, judged with
// the context given to Allow.
func (pp *Permit) Done(err error) error {
	p := *pp
	if p.b == nil {
		return err
	}
	*pp = Permit{}
	p.b.report(p.ctx, p.done, p.seq, err)
	if m := p.b.cb.Load(); m != p.m && m.epoch == p.m.epoch {
		// m's period ended: bring the current machine up to now.
		p.b.current(p.ctx)
	}
	if p.b.queued.Load() {
		p.b.flush(p.ctx)
	}
	return err
}

// Begin returns the context to run the permit's call with. With a slow
// rule, the answer httppolicy's Transport marks on it, the first byte of a
// body it hands over (the first event of an event stream), ends the time
// the rule judges; without one, the call is timed to Done. Without a slow
// rule, Begin returns ctx.
func (p Permit) Begin(ctx context.Context) context.Context {
	if p.seq == 0 {
		return ctx
	}
	return p.b.slow.begin(ctx, p.seq)
}

// State returns the breaker's state. An open breaker whose OpenTimeout has
// passed is half-open, even if no call has come since.
func (b *Breaker) State() State {
	_, s := b.current(context.Background())
	return s
}

// current brings the current machine up to now, reports the changes with
// ctx, and returns it (nil if forced open) and the state.
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
		if b.cb.Load() == m {
			return m, s
		}
	}
}

// Counts returns the breaker's counts now (see [Counts]). Like
// [Breaker.State], it may report a change of state. Every count is zero
// while open, and while [Breaker.OpenUntil] or a gated trip holds the
// breaker.
func (b *Breaker) Counts() Counts {
	m, _ := b.current(context.Background())
	if m == nil || m.held {
		return Counts{}
	}
	c := m.TwoStepCircuitBreaker.Counts()
	return Counts{Requests: c.Requests, TotalSuccesses: c.TotalSuccesses, TotalFailures: c.TotalFailures,
		TotalExclusions: c.TotalExclusions, ConsecutiveSuccesses: c.ConsecutiveSuccesses,
		ConsecutiveFailures: c.ConsecutiveFailures, SlowCalls: b.slow.counts(m)}
}

// ForceOpen opens the breaker until [Breaker.Reset]: every call is
// rejected with reason "open".
func (b *Breaker) ForceOpen() {
	b.mu.Lock()
	if !b.forced.Load() {
		b.forced.Store(true)
		b.queue(Open)
	}
	b.mu.Unlock()
	b.flush(context.Background())
}

// Reset closes the breaker, with fresh counts, and ends
// [Breaker.ForceOpen]. The outcomes of calls admitted before Reset are not
// counted.
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

// OpenUntil opens the breaker until t: every call is rejected with reason
// "open". From t the breaker is half-open, as after its own OpenTimeout,
// and its probes ask the gate set by [Breaker.GateProbes]. A t already
// past starts the half-open period at once. A later OpenUntil replaces an
// earlier one, and the outcomes of its probes in flight are ignored.
// [Breaker.Reset] ends it; [Breaker.ForceOpen] takes precedence over it.
// Changes are reported from the calling goroutine.
func (b *Breaker) OpenUntil(t time.Time) {
	m := b.newMachine(true, true)
	m.until = t.UnixNano()
	m.epoch = b.epochs.Add(1)
	to := Open
	if time.Now().UnixNano() >= m.until {
		// gobreaker turns m half-open once its clock is past the trip by
		// more than its 1 ns Timeout. A synctest bubble's clock moves only
		// when asleep.
		to = HalfOpen
		time.Sleep(2 * time.Nanosecond)
	}
	b.mu.Lock()
	b.cb.Store(m)
	if !b.forced.Load() {
		b.queue(to)
	}
	b.mu.Unlock()
	b.flush(context.Background())
}

// GateProbes sets gate, which a half-open breaker asks before it admits
// each probe, on the caller's goroutine and outside every lock. If gate
// returns false, the call is rejected with reason "half_open_full" and
// takes no probe's place. With a gate set, the breaker's own trips hold it
// open as [Breaker.OpenUntil] does; a trip already in force is not
// affected. A nil gate removes it. gate must be safe for concurrent use;
// it may call State and Counts.
func (b *Breaker) GateProbes(gate func(ctx context.Context) bool) {
	if gate == nil {
		b.gate.Store(nil)
		return
	}
	b.gate.Store(&gate)
}

// Close unregisters the watertight.breaker.state gauge. It always returns
// nil and may be called more than once. The Breaker goes on working.
func (b *Breaker) Close() error { return b.obs.Close() }

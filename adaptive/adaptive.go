package adaptive

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/slots"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// Limiter limits the number of calls to one dependency that run at once, as
// a bulkhead does, with a limit it finds itself from the latency of the
// calls: it lowers the limit while the latency rises above what the
// dependency shows without load, and raises it while it does not. Create
// one with [New]; the zero value is not usable.
//
// A Limiter is safe for concurrent use by multiple goroutines.
type Limiter struct {
	// slots is the admission core (internal/slots), shared with package
	// bulkhead; the controller moves its limit.
	slots slots.Slots

	// answers counts the calls in flight whose answer has arrived (see
	// countAnswer): a probe caps only the others, the calls awaiting it.
	answers atomic.Int64
	// countAnswer, as a func value built once.
	countAnswerFn func(delta int)

	// Read by every sample, written rarely: kept off the cache lines that
	// every call writes (the slots' counts, the window).
	_       [64]byte
	probing atomic.Bool  // a probe is running: samples go to observeProbe
	staleAt atomic.Int64 // the probe may be stale after this, in ns since base (see probeCheck)
	// staleBusyAt is staleAt for a probe with calls in flight: later
	// than staleAt before the first measurement (see stallLimit).
	staleBusyAt atomic.Int64
	peak        atomic.Int64 // most slots held seen by a sample in the window
	closeAt     atomic.Int64 // when the window may close, in ns since base
	openedAt    atomic.Int64 // when the window opened, in ns since base
	shift       atomic.Int64 // added to the clock's readings (see clock)
	// slowAbove is 3 x noLoad in ns, or 0 before noLoad is measured;
	// slowest is the window's slowest sample above it (see observe).
	slowAbove atomic.Int64
	capAt     atomic.Int64 // a window's sample counts at most this, in ns; 0: uncapped
	excess    atomic.Int64 // the window's samples' µs above capAt
	slowest   atomic.Int64
	_         [64]byte
	failures  atomic.Int64 // failed attempts in the window
	// cells hold the window's latency samples, striped so that concurrent
	// samples seldom write the same cache line (see observe).
	cells [stripes]cell

	// base is the origin of the controller's clock (monotonic).
	base time.Time

	// mu guards ctl; it is held only to close a window and during probes.
	mu  sync.Mutex
	ctl controller

	// drops counts the times the admission limit was lowered (for tests).
	drops atomic.Int64

	// learned is ctl.held, for Limit and the gauge without the lock.
	learned atomic.Int64

	full        *telemetry.Rejection
	waitTimeout *telemetry.Rejection
	onReject    func(ctx context.Context, err *policy.RejectedError)

	closeOnce sync.Once
	reg       metric.Registration // nil if registration failed
}

// New returns a Limiter configured by cfg, or an error naming the first
// invalid field of cfg. It never panics. The Limiter starts with a probe of
// the no-load latency: until it has its samples (128, or 10 once it has
// lasted 1 s), it admits at most 3 calls at once, and then no more until
// those calls have answered (see the package documentation).
func New(cfg Config) (*Limiter, error) {
	s, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	in := telemetry.NewInstruments(cfg.MeterProvider)
	l := &Limiter{
		base:        time.Now(),
		full:        telemetry.NewRejection(in, Kind, cfg.Name, ReasonFull, ErrFull),
		waitTimeout: telemetry.NewRejection(in, Kind, cfg.Name, ReasonWaitTimeout, ErrFull),
		onReject:    cfg.OnReject,
	}
	l.ctl.init(s)
	l.countAnswerFn = l.countAnswer
	l.learned.Store(int64(l.ctl.held))
	l.slots.Owner = "adaptive"
	l.slots.Init(s.initial, s.queueCap, s.maxWait)
	l.startProbe(0)
	l.reg = l.registerObservers(in.Meter, cfg.Name)
	return l, nil
}

// Execute runs fn once it is admitted, and frees its slot when fn returns,
// panics or calls runtime.Goexit. It times fn (two clock reads), up to the
// answer if httppolicy's Transport marks it (the response headers), and
// learns from its latency: see "What it samples" in the package
// documentation. It
// returns fn's error unchanged; a rejection (errors.Is ErrFull and
// policy.ErrRejected) if the limit is reached and the queue is full, the
// call waited Config.MaxWait in vain, or a Deadline's timer ended its wait;
// or ctx.Err() if the caller's ctx is done on entry or while waiting, in
// which case fn is not run. Execute panics if ctx or
// fn is nil.
func (l *Limiter) Execute(ctx context.Context, fn policy.Func) (err error) {
	if fn == nil {
		panic("adaptive: nil fn")
	}
	p, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	// A deferred release also runs if fn panics or calls runtime.Goexit,
	// so the slot is never lost; such an attempt is no sample.
	defer p.Release()
	ctx, s := p.Begin(ctx)
	finished := false
	defer func() {
		if !finished {
			s.End(stage.ErrAborted)
		}
	}()
	err = fn(ctx)
	finished = true
	s.End(err)
	return err
}

// Permit is a call admitted by [Limiter.Acquire]: it holds one slot until
// Release. The zero Permit holds nothing.
type Permit struct{ l *Limiter }

// Acquire admits one call, waiting as Execute does, and returns its
// [Permit]; or the error Execute would return without running fn. Acquire
// is the two-step form of Execute: sample each attempt with Permit.Begin
// and Sample.End, and call Permit.Release exactly once. It does not
// allocate on a rejection. It panics if ctx is nil.
func (l *Limiter) Acquire(ctx context.Context) (Permit, error) {
	if ctx == nil {
		panic("adaptive: nil Context")
	}
	if l.probing.Load() {
		l.probeCheck()
	}
	if o, err := l.slots.Acquire(ctx); o != slots.Admitted {
		return Permit{}, l.refused(ctx, o, err)
	}
	return Permit{l: l}, nil
}

// Sample is one attempt of a permitted call, begun by [Permit.Begin].
// Its End must be called once. The zero Sample's End does nothing.
type Sample struct {
	l *Limiter
	a *stage.Attempt
}

// Begin starts one attempt of the permit's call and returns the context it
// must run with. The attempt's latency ends at its answer if httppolicy's
// Transport marks one (the response headers), else at Sample.End; until
// its End, an answered attempt does not count against a probe's cap. It
// allocates the attempt's context.
func (p Permit) Begin(ctx context.Context) (context.Context, Sample) {
	if p.l == nil {
		return ctx, Sample{}
	}
	ctx, a := stage.Begin(ctx, p.l.countAnswerFn)
	return ctx, Sample{l: p.l, a: a}
}

// End ends the attempt, which ended with err, and samples it: see "What
// it samples" in the package documentation. A success or a timeout is a
// latency sample; a rejection from below or a cancellation says nothing;
// any other error is a failure.
func (s Sample) End(err error) {
	if s.l == nil {
		return
	}
	end := time.Now()
	d := s.a.End(end)
	switch {
	case err == nil:
		s.l.observe(d, false, end)
	case err == stage.ErrAborted, errors.Is(err, policy.ErrRejected), errors.Is(err, context.Canceled):
	case errors.Is(err, context.DeadlineExceeded):
		s.l.observe(d, false, end)
	default:
		s.l.observe(d, true, end)
	}
}

// Release frees the permit's slot. Call it once, after the End of its
// attempts; the zero Permit's Release does nothing.
func (p Permit) Release() {
	if p.l != nil {
		p.l.slots.Release()
	}
}

// countAnswer counts the calls in flight whose answer has arrived: a
// probe caps only the others.
func (l *Limiter) countAnswer(delta int) {
	l.answers.Add(int64(delta))
	l.answersChanged()
}

// Limit returns the limit the limiter has learned: the number of calls it
// admits at once, except during a probe of the no-load latency (when it is
// created, then now and then while the calls reach the limit), when it
// admits at most 3 (see the package documentation). It starts at
// Config.InitialLimit and always lies in [Config.MinLimit,
// Config.MaxLimit].
func (l *Limiter) Limit() int { return int(l.learned.Load()) }

// MaxLimit returns the most the limit may ever be: Config.MaxLimit, or its
// default. A pool of connections sized to it never makes an admitted call
// wait for one.
func (l *Limiter) MaxLimit() int { return int(l.ctl.max) }

// Active returns the number of calls holding a slot now, including a waiter
// that has been admitted and has not yet woken. It is exact, and may exceed
// Limit for a while after the limit was lowered: calls in flight are never
// revoked.
func (l *Limiter) Active() int { return l.slots.Active() }

// Queued returns the number of callers waiting to be admitted now. It is
// exact.
func (l *Limiter) Queued() int { return l.slots.Queued() }

// refused returns the error of an admission that ended with o and err
// (anything but slots.Admitted), having recorded it if it is a rejection.
func (l *Limiter) refused(ctx context.Context, o slots.Outcome, err error) error {
	switch o {
	case slots.RejectedFull:
		return l.reject(ctx, l.full)
	case slots.RejectedWaitTimeout:
		return l.reject(ctx, l.waitTimeout)
	}
	return err
}

// reject records a rejection for r and calls the OnReject hook. No lock is
// held.
func (l *Limiter) reject(ctx context.Context, r *telemetry.Rejection) error {
	err := r.Record(ctx)
	if l.onReject != nil {
		l.onReject(ctx, r.Err)
	}
	return err
}

package adaptive

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight/watertight/internal/slots"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// Limiter limits the calls to one dependency that run at once, with a
// limit it learns from their latency. Create one with [New]; the zero value
// is not usable. A Limiter is safe for concurrent use. With
// testing/synctest, build it in the bubble that uses it.
type Limiter struct {
	slots         slots.Slots     // the admission core, shared with package bulkhead
	answers       atomic.Int64    // calls in flight whose answer was marked
	countAnswerFn func(delta int) // countAnswer, built once

	_           [64]byte     // read by every sample, written rarely
	probing     atomic.Bool  // a probe is running: samples go to observeProbe
	staleAt     atomic.Int64 // the probe may be stale after this, with no call in flight (ns since base)
	staleBusyAt atomic.Int64 // and with calls in flight (see stallLimit)
	peak        atomic.Int64 // most slots held seen by a sample in the window
	reach       atomic.Int64 // most of that plus the slots closed to the sample's priority
	closeAt     atomic.Int64 // when the window may close, in ns since base
	openedAt    atomic.Int64 // when the window opened, in ns since base
	slowAbove   atomic.Int64 // 3 x noLoad in ns, or 0 before it is measured
	capAt       atomic.Int64 // a window's sample counts at most this, in ns; 0: uncapped
	excess      atomic.Int64 // the window's samples' µs above capAt
	slowest     atomic.Int64 // the window's slowest sample above slowAbove
	_           [64]byte
	failures    atomic.Int64  // failed attempts in the window
	window      atomic.Uint64 // the window's latency samples, packed (see countBits)

	base time.Time // the origin of the controller's clock

	mu  sync.Mutex // guards ctl; held to close a window and during probes
	ctl controller

	drops   atomic.Int64 // times the admission limit was lowered (for tests)
	learned atomic.Int64 // ctl.held, read without the lock

	rej telemetry.SlotRejections
	obs telemetry.Observers

	upd      sync.Mutex             // serialises Update; no call takes it
	cfg      atomic.Pointer[Config] // as given to New or the last Update
	maxLimit atomic.Int64           // ctl.cfg.MaxLimit, read without the lock
}

// New returns a Limiter configured by cfg, or an error naming the first
// invalid field of cfg. It never panics. The Limiter starts with a probe.
func New(cfg Config) (*Limiter, error) {
	given := cfg
	given.Reserve = maps.Clone(cfg.Reserve)
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	in := telemetry.NewInstruments(cfg.MeterProvider)
	l := &Limiter{
		base: time.Now(),
		rej:  telemetry.Rejecter{In: in, Kind: Kind, Name: cfg.Name, OnReject: cfg.OnReject}.Slots(ErrFull),
	}
	l.ctl.init(cfg)
	l.cfg.Store(&given)
	l.maxLimit.Store(int64(cfg.MaxLimit))
	l.countAnswerFn = l.countAnswer
	l.learned.Store(int64(l.ctl.held))
	l.slots.Owner = "adaptive"
	l.slots.Init(cfg.InitialLimit, cfg.MaxQueue, cfg.MaxWait, cfg.Reserve, cfg.keys())
	l.startProbe(0)
	l.registerObservers(in.Meter, cfg.Name)
	return l, nil
}

// Execute runs fn once it is admitted, and frees its slot when fn returns,
// panics or calls runtime.Goexit. It returns fn's error unchanged, or a
// rejection or ctx.Err() without running fn. It panics if ctx or fn is nil.
func (l *Limiter) Execute(ctx context.Context, fn policy.Func) (err error) {
	if fn == nil {
		panic("adaptive: nil fn")
	}
	p, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	defer p.Release()
	ctx, s := p.Begin(ctx)
	err = policy.ErrAborted // if fn panics or calls runtime.Goexit
	defer func() { s.End(err) }()
	return fn(ctx)
}

// Permit is a call admitted by [Limiter.Acquire]: it holds one slot until
// Release. The zero Permit holds nothing. Release makes a Permit zero, so
// a second Release of the same Permit does nothing; a copy is the same
// slot, so release only one of them.
type Permit struct {
	l *Limiter
	h slots.Held // the key the slot counts against, with MaxPerKey
}

// Acquire is the two-step form of Execute. It admits one call as Execute
// does, and returns its [Permit]. Sample each attempt with Permit.Begin and
// Sample.End, then call Permit.Release once. It panics if ctx is nil.
func (l *Limiter) Acquire(ctx context.Context) (Permit, error) {
	if ctx == nil {
		panic("adaptive: nil Context")
	}
	if l.probing.Load() {
		l.probeCheck()
	}
	o, h, err := l.slots.Acquire(ctx)
	if o != slots.Admitted {
		return Permit{}, l.rej.Refused(ctx, o, err)
	}
	return Permit{l: l, h: h}, nil
}

// Sample is one attempt begun by [Permit.Begin]. End makes a Sample zero,
// and the zero Sample's End does nothing: a second End of the same Sample
// samples nothing.
type Sample struct {
	l      *Limiter
	a      *stage.Sample
	closed int // the slots reserved above the call's priority
}

// Begin starts one attempt of the permit's call and returns the context it
// must run with. The latency ends at the answer if httppolicy's Transport
// marks one, else at Sample.End.
func (p Permit) Begin(ctx context.Context) (context.Context, Sample) {
	if p.l == nil {
		return ctx, Sample{}
	}
	closed := p.l.slots.Closed(ctx)
	ctx, a := stage.Begin(ctx, p.l.countAnswerFn, false)
	return ctx, Sample{l: p.l, a: a, closed: closed}
}

// End ends the attempt with its outcome err and samples it.
func (s *Sample) End(err error) {
	l, a, closed := s.l, s.a, s.closed
	if l == nil {
		return
	}
	*s = Sample{}
	end := time.Now()
	d := a.End(end)
	switch {
	case err == policy.ErrAborted, errors.Is(err, policy.ErrRejected), errors.Is(err, context.Canceled):
	case err == nil, errors.Is(err, context.DeadlineExceeded):
		l.observe(d, false, end, closed)
	default:
		l.observe(d, true, end, closed)
	}
}

// Release frees the permit's slot, after the End of its attempts, and
// makes p zero.
func (p *Permit) Release() {
	if l := p.l; l != nil {
		h := p.h
		*p = Permit{}
		l.slots.Release(h)
	}
}

// Limit returns the learned limit: the number of calls admitted at once,
// except during a probe. It starts at Config.InitialLimit and lies in
// [Config.MinLimit, Config.MaxLimit].
func (l *Limiter) Limit() int { return int(l.learned.Load()) }

// MaxLimit returns the Config.MaxLimit in force, or its default.
func (l *Limiter) MaxLimit() int { return int(l.maxLimit.Load()) }

// Active returns the number of calls holding a slot now. It may exceed
// Limit after the limit was lowered.
func (l *Limiter) Active() int { return l.slots.Active() }

// QueuedBy returns the number of callers of priority p waiting to be
// admitted now, 0 for an unknown priority. It takes no lock.
func (l *Limiter) QueuedBy(p policy.Priority) int { return l.slots.QueuedBy(p) }

// Keys returns the number of keys with state now: with FairShare, the
// keys that have a caller waiting or hold a slot counted against
// MaxPerKey; calls without a key are not counted. It takes the limiter's
// admission lock.
func (l *Limiter) Keys() int { return l.slots.KeysTracked() }

// Queued returns the number of callers waiting to be admitted now.
func (l *Limiter) Queued() int { return l.slots.Queued() }

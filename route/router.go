package route

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// Kind is the watertight.policy.kind and RejectedError.Kind of a Router.
const Kind = "route"

// ReasonUnavailable is the RejectedError.Reason and
// watertight.rejection.reason of a call no endpoint would take.
const ReasonUnavailable = "unavailable"

// ErrUnavailable is matched by the rejection of a call that no endpoint
// would take: each was refused by its own policies or at its
// MaxConcurrent. It matches [policy.ErrRejected].
var ErrUnavailable = policy.NewSentinel("route: no endpoint available")

// maxEffort is how many random pairs a pick draws before it looks at
// every endpoint, as Finagle's.
const maxEffort = 5

// Router spreads the attempts of calls over equivalent endpoints, each
// with its own policies (see the package documentation). Build one with
// [New] and put it in a pipeline's Route slot. It is safe for concurrent
// use. The zero value is not usable.
type Router struct {
	name    string
	eps     []endpoint
	epoch   time.Time
	set     atomic.Pointer[settings] // replaced whole by Update
	mu      sync.Mutex               // serialises Update; no call takes it
	ejected atomic.Int32

	unavailable *telemetry.Rejection
	rec         recorder
	obs         telemetry.Observers
}

// New returns a Router configured by cfg, or an error naming the first
// invalid field.
func New(cfg Config) (*Router, error) {
	cfg.Endpoints = slices.Clone(cfg.Endpoints)
	if err := cfg.withDefaults().validate(); err != nil {
		return nil, err
	}
	r := &Router{
		name:  cfg.Name,
		eps:   make([]endpoint, len(cfg.Endpoints)),
		epoch: time.Now(),
	}
	r.set.Store(newSettings(cfg))
	for i, ep := range cfg.Endpoints {
		e := &r.eps[i]
		e.picked, e.calls = Picked{Index: i, Name: ep.Name}, newCalls()
		if h, ok := ep.RateLimit.(interface{ Held() time.Duration }); ok {
			e.held = h.Held
		}
	}
	in := telemetry.NewInstruments(cfg.MeterProvider)
	r.unavailable = telemetry.Rejecter{In: in, Kind: Kind, Name: cfg.Name}.New(ReasonUnavailable, ErrUnavailable)
	r.rec = newRecorder(in, r)
	return r, nil
}

// Name returns Config.Name.
func (r *Router) Name() string { return r.name }

// Endpoints returns a copy of Config.Endpoints, as [Router.Config] does.
func (r *Router) Endpoints() []Endpoint { return r.Config().Endpoints }

// Close unregisters the router's observable instruments. It always
// returns nil; the Router goes on working without them.
func (r *Router) Close() error { return r.obs.Close() }

// now is the time since r was built, in ns, at least 1.
func (r *Router) now() int64 { return int64(time.Since(r.epoch)) + 1 }

// Permit is one attempt sent to an endpoint by [Router.Pick]. Exactly one
// of its Done and Refused must be called, once: until then the attempt
// counts as in flight. The zero Permit's methods do nothing. A Permit is
// not safe for concurrent use. A pipeline's Route slot does all this;
// Pick and its Permit are for running a Router by hand.
type Permit struct {
	r     *Router
	s     *settings       // those in force at Pick
	ctx   context.Context // Pick's, to tell the caller's end
	smp   *stage.Sample
	i, n  int32 // the endpoint, and the call in its list
	probe bool
}

// Index returns the index in Config.Endpoints of the permit's endpoint.
func (p Permit) Index() int { return int(p.i) }

// Pick chooses the endpoint of one attempt, and returns the context to run
// the attempt with, which carries the endpoint ([EndpointOf]). Bit i of
// tried marks endpoint i as tried by the call already: Pick avoids it while
// another is available. Bit i of refused marks an endpoint that refused
// this attempt: Pick never returns it. It returns ErrUnavailable's
// rejection when no endpoint is left.
func (r *Router) Pick(ctx context.Context, tried, refused uint64) (context.Context, Permit, error) {
	t := time.Now()
	now := int64(t.Sub(r.epoch)) + 1
	s := r.set.Load()
	for {
		i, probe := r.choose(s, now, tried, refused)
		if i < 0 {
			return ctx, Permit{}, r.unavailable.Record(ctx)
		}
		e := &r.eps[i]
		if limit := s.eps[i].limit; limit > 0 && e.pending.Add(1) > limit {
			e.pending.Add(-1)
			refused |= 1 << i
			r.endProbe(s, e, probe, false, now)
			continue
		} else if limit == 0 {
			e.pending.Add(1)
		}
		if !probe && e.held != nil && len(r.eps) > 1 && e.out.Load() == 0 {
			if h := e.held(); h > 0 {
				// Its hold is on: out until it ends, as long as another
				// endpoint is available.
				e.pending.Add(-1)
				e.out.Store(now + int64(h))
				continue
			}
		}
		actx, smp := stage.BeginAt(ctx, nil, true, t, &e.picked)
		p := Permit{r: r, s: s, ctx: ctx, smp: smp, i: int32(i), probe: probe}
		p.n = -1
		if len(r.eps) > 1 {
			// With one endpoint there is no choice, and no age to keep.
			p.n = e.begin(now, smp)
		}
		r.rec.picked(actx, i)
		return actx, p, nil
	}
}

// Left reports whether an endpoint is in and not in refused (bit i for
// endpoint i), so that Pick would return one.
func (r *Router) Left(refused uint64) bool {
	s := r.set.Load()
	for i := range r.eps {
		if r.ok(s, i, 0, refused, levelIn) {
			return true
		}
	}
	return false
}

// Done ends the attempt with its outcome err, and returns err. A nil err
// is a success, and its latency, up to the first byte of a stream, feeds
// the endpoint's estimate. A rejection counts nothing. An attempt ended by
// context.Canceled or by the caller's end (the end of Pick's ctx, not by a
// timer of this module) is no failure, but its time so far is a latency
// the endpoint took at least: it counts if above the estimate, so that an
// endpoint whose attempts are all cut short (a hedge's losers) is still
// seen to be slow. Any other error is a failure, which counts as a latency
// of twice the estimate, or the attempt's time if more.
func (p *Permit) Done(err error) error {
	if p.r == nil {
		return err
	}
	r, s, e := p.r, p.s, &p.r.eps[p.i]
	t := time.Now()
	now := int64(t.Sub(r.epoch)) + 1
	latency := float64(p.smp.End(t))
	switch {
	case err == nil:
		e.end(p.n, now, latency, true, s.decay)
		if e.out.Load() != 0 {
			r.tryReturn(s, p.i, now, latency, p.probe)
		}
	case errors.Is(err, policy.ErrRejected):
		e.end(p.n, now, 0, false, s.decay)
	case errors.Is(err, context.Canceled) || p.ctx.Err() != nil && !policy.TimedOut(p.ctx):
		e.end(p.n, now, latency, latency > float64(e.cost.Load()), s.decay)
	default:
		e.end(p.n, now, max(latency, 2*float64(e.cost.Load())), true, s.decay)
		r.failed(s, e, now, err)
	}
	r.endProbe(s, e, p.probe, !errors.Is(err, policy.ErrRejected), now)
	*p = Permit{}
	return err
}

// Refused ends an attempt that the endpoint's own policies refused before
// it ran: the endpoint is out until its next probe.
func (p *Permit) Refused() {
	if p.r == nil {
		return
	}
	r, s, e := p.r, p.s, &p.r.eps[p.i]
	p.smp.End(time.Now())
	now := r.now()
	e.end(p.n, now, 0, false, s.decay)
	laterOut(e, now+s.probeEvery)
	r.endProbe(s, e, p.probe, false, now)
	*p = Permit{}
}

// failed takes e out when the dependency said to stop: a spent quota, or
// a throttled answer whose hold is on.
func (r *Router) failed(s *settings, e *endpoint, now int64, err error) {
	switch {
	case errors.Is(err, policy.ErrQuotaSpent):
		laterOut(e, now+s.probeEvery)
	case errors.Is(err, policy.ErrThrottled) && e.held != nil:
		if h := e.held(); h > 0 {
			laterOut(e, now+int64(h))
		}
	}
}

// endProbe ends a probe of e at now, if the attempt was one; ran: fn
// ran. A probe that ran and left e out doubles the wait for the next.
func (r *Router) endProbe(s *settings, e *endpoint, probe, ran bool, now int64) {
	if probe && ran && e.out.Load() != 0 {
		e.misses.Add(1)
		laterOut(e, now+s.probeWait(e))
	}
	if probe {
		e.probing.Store(false)
	}
}

// laterOut keeps e out until at least at.
func laterOut(e *endpoint, at int64) {
	for o := e.out.Load(); o < at && !e.out.CompareAndSwap(o, at); o = e.out.Load() {
	}
}

// probeWait is the wait before e's next probe: ProbeInterval, doubled for
// each probe in a row that ran and did not bring it back, up to ten times
// it, so that a sick endpoint's probes take few of a light traffic.
func (s *settings) probeWait(e *endpoint) int64 {
	return min(s.probeEvery<<min(e.misses.Load(), 4), 10*s.probeEvery)
}

// tryReturn brings endpoint i back after a success of latency, unless it
// is an ejected outlier and latency is still too slow beside the others.
func (r *Router) tryReturn(s *settings, i int32, now int64, latency float64, probe bool) {
	e := &r.eps[i]
	if e.ejected.Load() {
		if s.outlier(int64(latency), r.bestCost(i)) {
			return
		}
		if !e.ejected.CompareAndSwap(true, false) {
			return
		}
		r.ejected.Add(-1)
	}
	if probe {
		e.reset(now, latency)
	}
	e.back.Store(now)
	e.misses.Store(0)
	e.out.Store(0)
	r.rec.returned(i)
}

// bestCost is the lowest latency estimate of the endpoints in, but i.
func (r *Router) bestCost(i int32) int64 {
	best := int64(0)
	for j := range r.eps {
		if c := r.eps[j].cost.Load(); int32(j) != i && r.eps[j].out.Load() == 0 && c > 0 && (best == 0 || c < best) {
			best = c
		}
	}
	return best
}

// eject takes endpoint i out as an outlier, unless the share is reached.
func (r *Router) eject(s *settings, i int, now int64) {
	e := &r.eps[i]
	if s.factor < 0 || !e.ejected.CompareAndSwap(false, true) {
		return
	}
	if r.ejected.Add(1) > s.maxEjected {
		r.ejected.Add(-1)
		e.ejected.Store(false)
		return
	}
	e.out.Store(now + s.probeEvery)
	r.rec.ejectedOne(i)
}

// choose returns the endpoint for an attempt at now, and whether the
// attempt is its probe; -1 if none is left.
func (r *Router) choose(s *settings, now int64, tried, refused uint64) (int, bool) {
	if i := r.claimProbe(s, now, refused); i >= 0 {
		return i, true
	}
	for level := range levels {
		if level == levelAny && r.someIn(refused) {
			return -1, false // those in are at their MaxConcurrent
		}
		if i := r.p2c(s, now, tried, refused, level); i >= 0 {
			return i, false
		}
	}
	return -1, false
}

// someIn reports whether an endpoint not in refused is in.
func (r *Router) someIn(refused uint64) bool {
	for i := range r.eps {
		if refused&(1<<i) == 0 && r.eps[i].out.Load() == 0 {
			return true
		}
	}
	return false
}

// The levels of a pick, each taking more endpoints than the one before.
const (
	levelFresh = iota // in, and not tried by the call
	levelIn           // in
	levelAny          // out too: the least bad, by latency
	levels
)

// ok reports whether endpoint i may be picked at level.
func (r *Router) ok(s *settings, i int, tried, refused uint64, level int) bool {
	e := &r.eps[i]
	bit := uint64(1) << i
	switch {
	case refused&bit != 0:
		return false
	case s.eps[i].limit > 0 && e.pending.Load() >= s.eps[i].limit:
		return false
	case level == levelAny:
		return true
	case e.out.Load() != 0:
		return false
	}
	return level == levelIn || tried&bit == 0
}

// p2c picks the lighter of two random endpoints that may be picked at
// level (the faster, at levelAny), or, after maxEffort draws, the lightest
// of all; -1 if none may be.
func (r *Router) p2c(s *settings, now int64, tried, refused uint64, level int) int {
	n := uint64(len(r.eps))
	if n == 1 {
		if r.ok(s, 0, tried, refused, level) {
			return 0
		}
		return -1
	}
	for range maxEffort {
		x := rand.Uint64()
		a := int(x % n)
		b := int((x >> 32) % (n - 1))
		if b >= a {
			b++
		}
		okA, okB := r.ok(s, a, tried, refused, level), r.ok(s, b, tried, refused, level)
		switch {
		case okA && okB:
			return r.better(s, now, a, b, level)
		case okA:
			return a
		case okB:
			return b
		}
	}
	best := -1
	for i := range r.eps {
		if r.ok(s, i, tried, refused, level) && (best < 0 || r.better(s, now, best, i, level) == i) {
			best = i
		}
	}
	return best
}

// better returns the lighter of a and b, ejecting the slower if it is an
// outlier beside the other.
func (r *Router) better(s *settings, now int64, a, b, level int) int {
	ea, eb := &r.eps[a], &r.eps[b]
	ca, cb := ea.costAt(now, true), eb.costAt(now, true)
	if level == levelAny {
		if cb < ca {
			return b
		}
		return a
	}
	switch {
	case s.outlier(ca, cb):
		r.eject(s, a, now)
		return b
	case s.outlier(cb, ca):
		r.eject(s, b, now)
		return a
	}
	la := float64(ca) * float64(ea.pending.Load()+1) / ea.weightAt(now, s.eps[a].weight, s.ramp)
	lb := float64(cb) * float64(eb.pending.Load()+1) / eb.weightAt(now, s.eps[b].weight, s.ramp)
	if lb < la {
		return b
	}
	return a
}

// minGap is the least by which an outlier's estimate passes the other's:
// below it, calls are fast, and a ratio is noise (a new connection, a
// pause).
const minGap = int64(100 * time.Millisecond)

// outlier reports whether estimate c is an outlier beside estimate of.
func (s *settings) outlier(c, of int64) bool {
	return s.factor > 0 && of > 0 && float64(c) > s.factor*float64(of) && c-of > minGap
}

// claimProbe returns an endpoint whose probe is due and not running, now
// claimed, or -1.
func (r *Router) claimProbe(s *settings, now int64, refused uint64) int {
	for i := range r.eps {
		e := &r.eps[i]
		o := e.out.Load()
		if o == 0 || o > now || refused&(1<<i) != 0 || !e.probing.CompareAndSwap(false, true) {
			continue
		}
		if e.out.CompareAndSwap(o, now+s.probeWait(e)) {
			return i
		}
		e.probing.Store(false)
	}
	return -1
}

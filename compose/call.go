package compose

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/keyed"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

// call is one run through a pipeline. It walks the slots with from, one
// stack frame per slot, and each frame ends its slot's hold when what is
// below returns. When fn hands the call over, each frame instead saves its
// exit in pending, innermost first, for Held.End to run later.
type call struct {
	p        *Pipeline
	slots    []slot // p.slots, or those of the endpoint picked
	fn       func(context.Context) error
	attempts trace.Tracer    // starts attempt spans, or nil
	learner  adaptive.Permit // the Bulkhead slot's adaptive permit, if any
	learns   bool            // learner is set
	mayHand  bool            // run by Start: fn may hand the call over
	handed   bool            // fn returned ErrHandOver under Start
	pending  []exit
	tried    uint64       // the endpoints the call's attempts were sent to
	hedged   *stage.Tried // those of the hedge the call is an attempt of
	looked   bool         // hedged was looked up
	ran      bool         // fn ran since the last pick
	// The call's telemetry, when it has any (kindCall).
	ctx   context.Context // the call's, with its span
	span  trace.Span
	start time.Time
	timed bool // the duration is recorded
}

// exit is what ends one slot's hold, or one attempt's or the call's
// telemetry. Only the fields of its kind are set.
type exit struct {
	kind   kind
	bulk   bulkhead.Permit
	adapt  adaptive.Permit
	timer  deadline.Timer
	rate   ratelimit.Permit
	brk    breaker.Permit
	span   trace.Span
	pick   route.Permit
	key    keyed.Held
	sample adaptive.Sample // kindAttempt: the adaptive limit's
	held   *held           // kindExecute: a policy of another package
}

// from runs slots[i:] and fn.
func (c *call) from(ctx context.Context, i int) error {
	if i == len(c.slots) {
		c.ran = true
		err := c.fn(ctx)
		if err == ErrHandOver && c.mayHand {
			c.handed = true
			return nil
		}
		return err
	}
	return c.run(ctx, i, &c.slots[i])
}

// run runs s, in place of slots[i], then slots[i+1:] and fn.
func (c *call) run(ctx context.Context, i int, s *slot) error {
	switch s.kind {
	case kindRoute:
		return c.route(ctx, i, s.router)
	case kindAttempt:
		if c.attempts == nil && !c.learns {
			return c.from(ctx, i+1) // no span, no sample: no frame
		}
		return c.attempt(ctx, i)
	case kindRetry:
		l := s.policy.(*retry.Retry).Start(ctx)
		for {
			err := c.from(l.Attempt(), i+1)
			if c.handed {
				return nil // a handed-over attempt is not retried
			}
			if !l.Next(err) {
				return l.Err()
			}
		}
	case kindExecute:
		return c.execute(ctx, s.policy, i)
	case kindKeyed:
		return c.keyed(ctx, i, s.policy.(*keyed.Group))
	}
	x := exit{kind: s.kind}
	inner, err := enter(ctx, s, &x)
	if err != nil {
		return err
	}
	if x.kind == kindAdaptive {
		c.learner, c.learns = x.adapt, true
	}
	return c.under(inner, i, &x)
}

// keyed runs slots[i] as the policy of the call's key, which it holds
// until that policy's hold ends.
func (c *call) keyed(ctx context.Context, i int, g *keyed.Group) (err error) {
	h, err := g.Acquire(ctx)
	if err != nil {
		return err
	}
	x := exit{kind: kindKeyed, key: h}
	inner := slot{policy: h.Policy(), kind: kindOf(h.Policy())}
	finished := false
	defer func() {
		if !finished {
			c.end(&x, policy.ErrAborted)
		}
	}()
	err = c.run(ctx, i, &inner)
	finished = true
	if c.handed {
		c.pending = append(c.pending, x)
		return nil
	}
	return c.end(&x, err)
}

// route runs one attempt on an endpoint r picks, and on another if the
// endpoint's own policies refuse it, or if it answers that its quota is
// spent while another endpoint is in.
func (c *call) route(ctx context.Context, i int, r *route.Router) error {
	var refused uint64
	if !c.looked && len(c.p.routed) > 1 {
		c.hedged, c.looked = stage.HedgeTried(ctx), true
	}
	for {
		tried := c.tried
		if c.hedged != nil {
			tried |= c.hedged.Load()
		}
		actx, pm, err := r.Pick(ctx, tried, refused)
		if err != nil {
			return err
		}
		bit := uint64(1) << pm.Index()
		c.tried |= bit
		if c.hedged != nil {
			c.hedged.Add(bit)
		}
		c.slots = c.p.routed[pm.Index()]
		c.ran = false
		x := exit{kind: kindRoute, pick: pm}
		err = c.under(actx, i, &x)
		refused |= bit
		switch {
		case c.handed:
			return err
		case !c.ran && errors.Is(err, policy.ErrRejected):
			continue // refused by the endpoint's own policies
		case c.ran && errors.Is(err, policy.ErrQuotaSpent) && r.Left(refused):
			continue // the endpoint's quota, not another's
		}
		return err
	}
}

// execute runs p, a policy of another package, with the slots below it as
// its fn. The fn refers to a copy of c on the heap, so that a call through
// this module's policies alone keeps its state on its goroutine's stack;
// the copy's state comes back when p returns, or when the call is handed
// over (see held).
func (c *call) execute(ctx context.Context, p policy.Policy, i int) error {
	h := new(call)
	*h = *c
	if !c.mayHand {
		err := p.Execute(ctx, func(ctx context.Context) error { return h.from(ctx, i+1) })
		*c = *h
		return err
	}
	hd := &held{handed: make(chan struct{}), outcome: make(chan error), done: make(chan heldEnd, 1)}
	go hd.run(ctx, p, func(ctx context.Context) error {
		// fn owns h while it runs: a policy that runs fn twice at once, or
		// after its Execute returned and the call went on, gets it refused.
		if !hd.running.TryLock() {
			return policy.Permanent(errConcurrent)
		}
		defer hd.running.Unlock()
		if h.handed { // p ran fn again after the call was handed over
			if err := ctx.Err(); err != nil {
				return err
			}
			return policy.Permanent(errOver)
		}
		err := h.from(ctx, i+1)
		switch {
		case !h.handed:
			return err
		case !hd.hand():
			// Nothing holds the call: free what is below now.
			err, h.pending, h.handed = h.endFrom(0, nil), nil, false
			return err
		}
		return <-hd.outcome
	})
	select {
	case <-hd.handed:
	case e := <-hd.done:
		select {
		case <-hd.handed:
			// fn handed the call over as p returned without waiting
			// for it: End reads p's end again.
			hd.done <- e
		default:
			hd.running.Lock() // for good: an fn p left running ends first
			*c = *h
			return e.raise()
		}
	}
	*c = *h
	c.pending = append(c.pending, exit{kind: kindExecute, held: hd})
	return nil
}

// errOver is the error of an attempt that a policy of another package
// starts after the call was handed over and ended.
var errOver = errors.New("compose: the call is over: a policy ran fn again after it was handed over")

// errConcurrent is the error of an attempt that a policy of another
// package starts while another runs, or after its Execute returned.
var errConcurrent = errors.New("compose: a policy ran two attempts of a call at once, or one after its Execute returned")

// held is a policy of another package in a call that Start may hand over,
// run as the package doc's Hand-over section says. A panic or
// runtime.Goexit in it goes on up Start's caller before the hand-over, and
// up End's caller after.
type held struct {
	handed  chan struct{} // closed when fn handed the call over
	outcome chan error    // the held call's outcome, for fn to return
	done    chan heldEnd  // Execute's end

	mu       sync.Mutex
	returned bool // Execute returned: nobody holds a call fn hands over

	running sync.Mutex // held by fn while it runs, and by the call once Execute returned
}

// hand reports whether the call fn handed over is held: not if the policy
// returned before its fn did (it should have waited for it).
func (h *held) hand() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.returned {
		close(h.handed)
	}
	return !h.returned
}

type heldEnd struct {
	err      error
	panicked bool
	pval     any // with panicked, nil for runtime.Goexit
}

func (h *held) run(ctx context.Context, p policy.Policy, fn policy.Func) {
	e := heldEnd{panicked: true} // stays so if Execute panics or calls runtime.Goexit
	defer func() { h.done <- e }()
	defer func() {
		if e.panicked {
			e.pval = recover() // nil for runtime.Goexit
		}
	}()
	e.err = p.Execute(ctx, fn)
	e.panicked = false
	h.mu.Lock()
	h.returned = true
	h.mu.Unlock()
}

// end gives the held call's outcome err to fn, and returns what Execute
// returns once it has.
func (h *held) end(err error) error {
	h.outcome <- err
	e := <-h.done
	return e.raise()
}

// raise returns e's error, or raises its panic or runtime.Goexit on the
// caller's goroutine.
func (e heldEnd) raise() error {
	switch {
	case !e.panicked:
		return e.err
	case e.pval == nil:
		runtime.Goexit()
	}
	panic(e.pval)
}

// enter takes the hold of the built-in policy in s, and records in x
// what ends it.
func enter(ctx context.Context, s *slot, x *exit) (context.Context, error) {
	var err error
	switch p := s.policy.(type) {
	case *bulkhead.Bulkhead:
		x.bulk, err = p.Acquire(ctx)
	case *adaptive.Limiter:
		x.adapt, err = p.Acquire(ctx)
	case *deadline.Deadline:
		ctx, x.timer = p.Start(ctx)
	case *ratelimit.Limiter:
		if x.rate, err = p.Wait(ctx); err == nil {
			ctx = x.rate.Begin(ctx)
		}
	case *breaker.Breaker:
		if x.brk, err = p.Allow(ctx); err == nil {
			ctx = x.brk.Begin(ctx)
		}
	}
	return ctx, err
}

// attempt starts one attempt's span and sample, then runs what is below.
func (c *call) attempt(ctx context.Context, i int) error {
	x := exit{kind: kindAttempt}
	if c.attempts != nil && c.p.retries {
		ctx, x.span = c.attempts.Start(ctx, c.p.attemptName, trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(telemetry.KeyAttempt.Int(retry.Attempt(ctx))))
	}
	ctx, x.sample = c.learner.Begin(ctx)
	return c.under(ctx, i, &x)
}

// under runs slots[i+1:] and fn, then ends x with their outcome: at once,
// or, if fn handed the call over, once Held.End is called. If anything
// below panics or calls runtime.Goexit, x ends with policy.ErrAborted and
// the panic goes on.
func (c *call) under(ctx context.Context, i int, x *exit) (err error) {
	finished := false
	defer func() {
		if !finished {
			c.end(x, policy.ErrAborted)
		}
	}()
	err = c.from(ctx, i+1)
	finished = true
	if c.handed {
		c.pending = append(c.pending, *x)
		return nil
	}
	return c.end(x, err)
}

// end ends x with the outcome err and returns the outcome as seen above it.
func (c *call) end(x *exit, err error) error {
	switch x.kind {
	case kindBulkhead:
		x.bulk.Release()
	case kindAdaptive:
		x.adapt.Release()
	case kindDeadline:
		return x.timer.Stop(err)
	case kindRateLimit:
		return x.rate.Done(err)
	case kindBreaker:
		return x.brk.Done(err)
	case kindAttempt:
		x.sample.End(err)
		if x.span != nil {
			endSpan(x.span, err)
		}
	case kindRoute:
		if !c.ran && errors.Is(err, policy.ErrRejected) {
			x.pick.Refused()
			return err
		}
		return x.pick.Done(err)
	case kindKeyed:
		x.key.Release()
	case kindCall:
		c.p.observe(c.ctx, c.span, c.start, c.timed, err)
	case kindExecute:
		return x.held.end(err)
	}
	return err
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(telemetry.KeyError.String(telemetry.ErrorType(err)))
	}
	span.End()
}

// Held is a call that [Pipeline.Start] handed over: every policy of the
// pipeline still holds what it took for it. Its End must be called once.
type Held struct {
	c     *call
	ended bool
}

// End ends the held call with its outcome err, which each policy judges
// as if fn had returned it, innermost first, and returns the call's error.
// If a policy's work panics, the policies outside it still end (with an
// aborted outcome) and the panic goes on. End panics if called twice.
func (h *Held) End(err error) error {
	if h.ended {
		panic("compose: held call ended twice")
	}
	h.ended = true
	return h.c.endFrom(0, err)
}

// endFrom ends pending[k:] in order, each with the error the one before
// returned.
func (c *call) endFrom(k int, err error) error {
	for ; k < len(c.pending); k++ {
		ok := false
		func() {
			defer func() {
				if !ok {
					c.abortFrom(k + 1)
				}
			}()
			err = c.end(&c.pending[k], err)
			ok = true
		}()
	}
	return err
}

// abortFrom ends pending[k:] as aborted, each even if one before panics.
func (c *call) abortFrom(k int) {
	if k >= len(c.pending) {
		return
	}
	defer c.abortFrom(k + 1)
	c.end(&c.pending[k], policy.ErrAborted)
}

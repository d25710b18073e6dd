package watertight

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/internal/pipeopt"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
	"go.opentelemetry.io/otel/metric"
)

// Config describes a pipeline: one section per slot of compose.Policies,
// in the order calls run through them. A nil section leaves its slot
// empty. The zero Config is valid: a pipeline that only records each
// call's span and duration. [New] does not modify it.
//
// Config reads and writes JSON, each section under its json tag's key
// (see the package doc); Use is not data and is neither written nor read.
type Config struct {
	// Bulkhead limits the calls in flight and waiting (outermost).
	Bulkhead *bulkhead.Config `json:"bulkhead"`
	// Adaptive takes the Bulkhead slot: a bulkhead that finds its own
	// limit. At most one of Bulkhead, Adaptive and Use.Bulkhead may be set.
	Adaptive *adaptive.Config `json:"adaptive"`
	// Deadline bounds the whole call: every attempt and every wait.
	Deadline *deadline.Config `json:"deadline"`
	// Retry repeats failed attempts.
	Retry *retry.Config `json:"retry"`
	// RateLimit admits each attempt at the pace the dependency allows.
	// With a Retry section, a zero MaxWait takes its MaxInterval
	// (10s if that is 0, as in retry.Config).
	RateLimit *ratelimit.Config `json:"rate_limit"`
	// Breaker stops calling a failing dependency; it sees every attempt.
	Breaker *breaker.Config `json:"breaker"`
	// Attempt bounds each attempt (innermost). Its Timeout must not be
	// longer than Deadline's.
	Attempt *deadline.Config `json:"attempt"`

	// Route, if set, sends each attempt to one of its endpoints, below
	// Retry (see package route). Each endpoint then gets a RateLimit,
	// Breaker and Attempt of its own, built from those sections and named
	// name.endpoint (name.endpoint.attempt for the Attempt; a section's
	// own Name, with .endpoint added), unless it holds its own. Each
	// section is checked even so. The Route's empty Name takes name; its
	// nil MeterProvider, the pipeline's.
	Route *route.Config `json:"route"`

	// Use takes ready policies, slot by slot. A slot may be set here or by
	// its section, not both. The Pipeline's Close does not close them, and
	// its Update leaves them as they are.
	Use compose.Policies `json:"-"`

	// OnUpdate, if not nil, is called after each [Pipeline.Update] that
	// changed a setting, with the pipeline's name and what changed, on
	// the goroutine of the Update and under its lock: updates are told in
	// the order they were applied. An Update keeps the OnUpdate New was
	// given.
	OnUpdate func(pipeline string, changes []Change) `json:"-"`
}

// Pipeline is the pipeline [New] builds: a compose.Pipeline, and the
// policies New built for it. It is a policy.Policy and safe for concurrent
// use. The zero value is not usable.
type Pipeline struct {
	pipe *compose.Pipeline

	pols  compose.Policies
	owned []io.Closer // what New built and Close closes
	// endpoints holds, per endpoint of the Route, the RateLimit, Breaker
	// and Attempt New built from the sections (nil where the endpoint
	// held its own), which Update updates.
	endpoints [][3]policy.Policy
	updates   updates
}

// New builds the pipeline named name, which must not be empty, from cfg.
// A section's empty Name takes name (the Attempt section's takes
// name + ".attempt"). A section's nil MeterProvider takes the one set by
// compose.WithMeterProvider in opts.
//
// An invalid section fails with an error that names it and wraps the
// policy's own: "watertight: Bulkhead: Config.Limit must be >= 1, got 0".
// So does a slot set twice, and an Attempt timeout longer than the
// Deadline's. On error New closes what it built.
func New(name string, cfg Config, opts ...compose.Option) (*Pipeline, error) {
	if name == "" {
		return nil, errors.New("watertight: name must not be empty")
	}
	pols := cfg.Use
	mp := pipeopt.Apply(opts).MeterProvider
	secs := sections(cfg, name, mp, &pols)
	if err := checkSlots(secs); err != nil {
		return nil, err
	}
	if cfg.Route != nil {
		if cfg.Use.Route != nil {
			return nil, errors.New("watertight: Route: both Route and Use.Route set")
		}
		for i := range secs[4:] {
			secs[4+i].set = false // each endpoint's own, below
		}
	}
	p := &Pipeline{}
	err := p.build(secs)
	if err == nil && cfg.Route != nil {
		pols.Route, err = p.buildRoute(cfg, name, mp)
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	if d, a := cfg.Deadline, cfg.Attempt; d != nil && a != nil && a.Timeout > d.Timeout {
		// The section, whether it fills the Attempt slot or no endpoint
		// uses it.
		p.Close()
		return nil, fmt.Errorf("watertight: Attempt: Timeout %v is longer than the Deadline's Timeout %v", a.Timeout, d.Timeout)
	}
	d, _ := pols.Deadline.(*deadline.Deadline)
	if a, ok := pols.Attempt.(*deadline.Deadline); ok && d != nil && d.Timeout() > 0 && a.Timeout() > d.Timeout() {
		p.Close()
		return nil, fmt.Errorf("watertight: Attempt: Timeout %v is longer than the Deadline's Timeout %v", a.Timeout(), d.Timeout())
	}
	p.pols = pols
	cp, err := compose.New(name, pols, opts...)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("watertight: %w", err)
	}
	p.pipe = cp
	p.updates.init(name, cfg, mp)
	return p, nil
}

// Execute runs fn through the pipeline, as compose.Pipeline's Execute
// does.
func (p *Pipeline) Execute(ctx context.Context, fn policy.Func) error {
	return p.pipe.Execute(ctx, fn)
}

// Start runs fn through the pipeline for a call that may outlive Start,
// as compose.Pipeline's Start does.
func (p *Pipeline) Start(ctx context.Context, fn policy.Func) (*compose.Held, error) {
	return p.pipe.Start(ctx, fn)
}

// Name returns the pipeline's name.
func (p *Pipeline) Name() string { return p.pipe.Name() }

// Bulkhead returns the *bulkhead.Bulkhead in the Bulkhead slot, or nil.
func (p *Pipeline) Bulkhead() *bulkhead.Bulkhead {
	b, _ := p.policies().Bulkhead.(*bulkhead.Bulkhead)
	return b
}

// Limiter returns the *adaptive.Limiter in the Bulkhead slot, or nil.
func (p *Pipeline) Limiter() *adaptive.Limiter {
	l, _ := p.policies().Bulkhead.(*adaptive.Limiter)
	return l
}

// Breaker returns the *breaker.Breaker in the Breaker slot, or nil.
func (p *Pipeline) Breaker() *breaker.Breaker {
	b, _ := p.policies().Breaker.(*breaker.Breaker)
	return b
}

// Router returns the *route.Router in the Route slot, or nil.
func (p *Pipeline) Router() *route.Router { return p.policies().Route }

// RateLimit returns the *ratelimit.Limiter in the RateLimit slot, or nil.
func (p *Pipeline) RateLimit() *ratelimit.Limiter {
	l, _ := p.policies().RateLimit.(*ratelimit.Limiter)
	return l
}

// Policies returns the policies in the pipeline's slots: those New built
// and those of Config.Use.
func (p *Pipeline) Policies() compose.Policies { return p.policies() }

// CountRejections starts counting the pipeline's rejected calls for
// Rejections, as compose.Pipeline's CountRejections does.
func (p *Pipeline) CountRejections() { p.pipe.CountRejections() }

// Rejections returns the rejected calls counted since CountRejections, as
// compose.Pipeline's Rejections does.
func (p *Pipeline) Rejections() []compose.RejectionCount { return p.pipe.Rejections() }

// policies returns the slots' policies, none for a nil Pipeline.
func (p *Pipeline) policies() compose.Policies {
	if p == nil {
		return compose.Policies{}
	}
	return p.pols
}

// Close closes the policies New built from cfg's sections, not those in
// Config.Use, and returns their errors joined. The Pipeline goes on
// working without their observable instruments. Close is safe on a nil
// Pipeline and may be called more than once.
func (p *Pipeline) Close() error {
	if p == nil {
		return nil
	}
	var errs []error
	for _, c := range p.owned {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// section is one section of a Config: its name, the compose.Policies
// slot it fills, and how it builds its policy and updates it. sections is
// the one table of them: checkSlots, build and Update read it.
type section struct {
	name, slot string
	set        bool
	dst        *policy.Policy // the slot in the Policies built
	build      func() (policy.Policy, error)
	update     func(policy.Policy) error
}

// sections returns cfg's sections in slot order, to fill pols, named and
// metered as New says, with mp.
func sections(cfg Config, name string, mp metric.MeterProvider, pols *compose.Policies) []section {
	fill := func(n *string, m *metric.MeterProvider, suffix string) {
		*n = cmp.Or(*n, name+suffix)
		*m = cmp.Or(*m, mp)
	}
	return []section{
		newSection("Bulkhead", "Bulkhead", cfg.Bulkhead, &pols.Bulkhead, bulkhead.New, func(c *bulkhead.Config) {
			fill(&c.Name, &c.MeterProvider, "")
		}),
		newSection("Adaptive", "Bulkhead", cfg.Adaptive, &pols.Bulkhead, adaptive.New, func(c *adaptive.Config) {
			fill(&c.Name, &c.MeterProvider, "")
		}),
		newSection("Deadline", "Deadline", cfg.Deadline, &pols.Deadline, deadline.New, func(c *deadline.Config) {
			fill(&c.Name, &c.MeterProvider, "")
		}),
		newSection("Retry", "Retry", cfg.Retry, &pols.Retry, retry.New, func(c *retry.Config) {
			fill(&c.Name, &c.MeterProvider, "")
		}),
		newSection("RateLimit", "RateLimit", cfg.RateLimit, &pols.RateLimit, ratelimit.New, func(c *ratelimit.Config) {
			fill(&c.Name, &c.MeterProvider, "")
			if c.MaxWait == 0 && cfg.Retry != nil {
				c.MaxWait = cmp.Or(cfg.Retry.MaxInterval, 10*time.Second)
			}
		}),
		newSection("Breaker", "Breaker", cfg.Breaker, &pols.Breaker, breaker.New, func(c *breaker.Config) {
			fill(&c.Name, &c.MeterProvider, "")
		}),
		newSection("Attempt", "Attempt", cfg.Attempt, &pols.Attempt, deadline.New, func(c *deadline.Config) {
			fill(&c.Name, &c.MeterProvider, ".attempt")
		}),
	}
}

// newSection returns the section name of slot, set if c is not nil, whose
// policy newPolicy builds from c as fill completes it, and whose update
// gives that policy the same Config.
func newSection[C any, P policy.Policy](name, slot string, c *C, dst *policy.Policy, newPolicy func(C) (P, error), fill func(*C)) section {
	s := section{name: name, slot: slot, set: c != nil, dst: dst}
	if c == nil {
		return s
	}
	in := *c
	fill(&in)
	s.build = func() (policy.Policy, error) { return built(newPolicy(in)) }
	s.update = func(p policy.Policy) error {
		u, ok := p.(interface{ Update(C) error })
		if !ok {
			return fmt.Errorf("watertight: %s: a %T cannot be updated", name, p)
		}
		return u.Update(in)
	}
	return s
}

// built returns p as a policy.Policy, or nil on error: a typed nil would
// be a filled slot.
func built[P policy.Policy](p P, err error) (policy.Policy, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}

// checkSlots reports a slot set twice: by a section and Config.Use, or by
// two sections.
func checkSlots(secs []section) error {
	by := map[string]string{}
	for _, s := range secs {
		switch {
		case !s.set:
			continue
		case *s.dst != nil:
			return fmt.Errorf("watertight: %s: both %s and Use.%s set%s", s.name, s.name, s.slot, sameSlot(s.name, s.slot))
		case by[s.slot] != "":
			return fmt.Errorf("watertight: %s: both %s and %s set%s", s.name, by[s.slot], s.name, sameSlot(s.name, s.slot))
		}
		by[s.slot] = s.name
	}
	return nil
}

func sameSlot(name, slot string) string {
	if name == slot {
		return ""
	}
	return " (they take the same slot)"
}

// build builds the sections that are set into their slots. p owns what
// it built that has a Close, even on error. An error names the section
// in place of the policy package's prefix, and wraps the policy's.
func (p *Pipeline) build(secs []section) error {
	for _, s := range secs {
		if !s.set {
			continue
		}
		pol, err := s.build()
		if err != nil {
			_, msg, _ := strings.Cut(err.Error(), ": ")
			return &configError{msg: "watertight: " + s.name + ": " + msg, err: err}
		}
		if c, ok := pol.(io.Closer); ok {
			p.owned = append(p.owned, c)
		}
		*s.dst = pol
	}
	return nil
}

// buildRoute builds cfg.Route's router, with the endpoints' policies
// built from cfg's RateLimit, Breaker and Attempt sections.
func (p *Pipeline) buildRoute(cfg Config, name string, mp metric.MeterProvider) (*route.Router, error) {
	// Each section is checked, even if every endpoint holds its own.
	check := &Pipeline{}
	err := check.build(sections(cfg, name, mp, &compose.Policies{})[4:])
	check.Close()
	if err != nil {
		return nil, err
	}
	rc := *cfg.Route
	rc.Name = cmp.Or(rc.Name, name)
	rc.MeterProvider = cmp.Or(rc.MeterProvider, mp)
	rc.Endpoints = slices.Clone(rc.Endpoints)
	for i := range rc.Endpoints {
		ep := &rc.Endpoints[i]
		var own compose.Policies
		secs := sections(endpointSections(cfg, "."+ep.Name), name+"."+ep.Name, mp, &own)[4:]
		for k, pol := range ep.Policies() {
			secs[k].set = secs[k].set && pol == nil
		}
		if err := p.build(secs); err != nil {
			return nil, err // checked above: only the name differs
		}
		p.endpoints = append(p.endpoints, [3]policy.Policy{own.RateLimit, own.Breaker, own.Attempt})
		ep.RateLimit = cmp.Or(ep.RateLimit, own.RateLimit)
		ep.Breaker = cmp.Or(ep.Breaker, own.Breaker)
		ep.Attempt = cmp.Or(ep.Attempt, own.Attempt)
	}
	r, err := route.New(rc)
	if err != nil {
		_, msg, _ := strings.Cut(err.Error(), ": ")
		return nil, &configError{msg: "watertight: Route: " + msg, err: err}
	}
	p.owned = append(p.owned, r)
	return r, nil
}

// endpointSections returns cfg with suffix added to the names its
// RateLimit, Breaker and Attempt sections set, so that each endpoint's
// policies have names of their own.
func endpointSections(cfg Config, suffix string) Config {
	cfg.RateLimit = named(cfg.RateLimit, func(c *ratelimit.Config) *string { return &c.Name }, suffix)
	cfg.Breaker = named(cfg.Breaker, func(c *breaker.Config) *string { return &c.Name }, suffix)
	cfg.Attempt = named(cfg.Attempt, func(c *deadline.Config) *string { return &c.Name }, suffix)
	return cfg
}

// named returns c, or a copy of it whose set name has suffix added.
func named[C any](c *C, name func(*C) *string, suffix string) *C {
	if c == nil || *name(c) == "" {
		return c
	}
	cp := *c
	*name(&cp) += suffix
	return &cp
}

type configError struct {
	msg string
	err error
}

func (e *configError) Error() string { return e.msg }
func (e *configError) Unwrap() error { return e.err }

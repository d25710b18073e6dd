package watertight

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
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
	"go.opentelemetry.io/otel/metric"
)

// Config describes a pipeline: one section per slot of compose.Policies,
// in the order calls run through them. A nil section leaves its slot
// empty. The zero Config is valid: a pipeline that only records each
// call's span and duration. [New] does not modify it.
type Config struct {
	// Bulkhead limits the calls in flight and waiting (outermost).
	Bulkhead *bulkhead.Config
	// Adaptive takes the Bulkhead slot: a bulkhead that finds its own
	// limit. At most one of Bulkhead, Adaptive and Use.Bulkhead may be set.
	Adaptive *adaptive.Config
	// Deadline bounds the whole call: every attempt and every wait.
	Deadline *deadline.Config
	// Retry repeats failed attempts.
	Retry *retry.Config
	// RateLimit admits each attempt at the pace the dependency allows.
	// With a Retry section, a zero MaxWait takes its MaxInterval
	// (10s if that is 0, as in retry.Config).
	RateLimit *ratelimit.Config
	// Breaker stops calling a failing dependency; it sees every attempt.
	Breaker *breaker.Config
	// Attempt bounds each attempt (innermost). Its Timeout must not be
	// longer than Deadline's.
	Attempt *deadline.Config

	// Use takes ready policies, slot by slot. A slot may be set here or by
	// its section, not both. The Pipeline's Close does not close them.
	Use compose.Policies
}

// Pipeline is the pipeline [New] builds: a compose.Pipeline, and the
// policies New built for it. It is a policy.Policy and safe for concurrent
// use. The zero value is not usable.
type Pipeline struct {
	pipe *compose.Pipeline

	bulkhead  *bulkhead.Bulkhead
	limiter   *adaptive.Limiter
	breaker   *breaker.Breaker
	rateLimit *ratelimit.Limiter
	owned     []io.Closer // what New built and Close closes
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
	if err := checkSlots(cfg); err != nil {
		return nil, err
	}
	p := &Pipeline{}
	pols := cfg.Use
	if err := p.sections(cfg, name, pipeopt.Apply(opts).MeterProvider, &pols); err != nil {
		p.Close()
		return nil, err
	}
	d, _ := pols.Deadline.(*deadline.Deadline)
	if a, ok := pols.Attempt.(*deadline.Deadline); ok && d != nil && d.Timeout() > 0 && a.Timeout() > d.Timeout() {
		p.Close()
		return nil, fmt.Errorf("watertight: Attempt: Timeout %v is longer than the Deadline's Timeout %v", a.Timeout(), d.Timeout())
	}
	p.bulkhead, _ = pols.Bulkhead.(*bulkhead.Bulkhead)
	p.limiter, _ = pols.Bulkhead.(*adaptive.Limiter)
	p.breaker, _ = pols.Breaker.(*breaker.Breaker)
	p.rateLimit, _ = pols.RateLimit.(*ratelimit.Limiter)
	cp, err := compose.New(name, pols, opts...)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("watertight: %w", err)
	}
	p.pipe = cp
	return p, nil
}

// Execute runs fn through the pipeline, as compose.Pipeline's Execute
// does.
func (p *Pipeline) Execute(ctx context.Context, fn policy.Func) error {
	return p.pipe.Execute(ctx, fn)
}

// Start runs fn through the pipeline for a call that may outlive Start,
// as compose.Pipeline's Start does: httppolicy.Transport holds a call
// across its response body with it.
func (p *Pipeline) Start(ctx context.Context, fn policy.Func) (*compose.Held, error) {
	return p.pipe.Start(ctx, fn)
}

// Name returns the pipeline's name.
func (p *Pipeline) Name() string { return p.pipe.Name() }

// Bulkhead returns the *bulkhead.Bulkhead in the Bulkhead slot, or nil.
func (p *Pipeline) Bulkhead() *bulkhead.Bulkhead {
	if p == nil {
		return nil
	}
	return p.bulkhead
}

// Limiter returns the *adaptive.Limiter in the Bulkhead slot, or nil.
func (p *Pipeline) Limiter() *adaptive.Limiter {
	if p == nil {
		return nil
	}
	return p.limiter
}

// Breaker returns the *breaker.Breaker in the Breaker slot, or nil.
func (p *Pipeline) Breaker() *breaker.Breaker {
	if p == nil {
		return nil
	}
	return p.breaker
}

// RateLimit returns the *ratelimit.Limiter in the RateLimit slot, or nil.
func (p *Pipeline) RateLimit() *ratelimit.Limiter {
	if p == nil {
		return nil
	}
	return p.rateLimit
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

// sections builds cfg's sections into pols. p owns what it built, even on
// error.
func (p *Pipeline) sections(cfg Config, name string, mp metric.MeterProvider, pols *compose.Policies) error {
	fill := func(n *string, m *metric.MeterProvider, def string) {
		if *n == "" {
			*n = def
		}
		if *m == nil {
			*m = mp
		}
	}
	if c := cfg.Bulkhead; c != nil {
		cc := *c
		fill(&cc.Name, &cc.MeterProvider, name)
		bh, err := bulkhead.New(cc)
		if err != nil {
			return sectionErr("Bulkhead", "bulkhead", err)
		}
		p.owned = append(p.owned, bh)
		pols.Bulkhead = bh
	}
	if c := cfg.Adaptive; c != nil {
		cc := *c
		fill(&cc.Name, &cc.MeterProvider, name)
		l, err := adaptive.New(cc)
		if err != nil {
			return sectionErr("Adaptive", "adaptive", err)
		}
		p.owned = append(p.owned, l)
		pols.Bulkhead = l
	}
	if c := cfg.Deadline; c != nil {
		cc := *c
		fill(&cc.Name, &cc.MeterProvider, name)
		dl, err := deadline.New(cc)
		if err != nil {
			return sectionErr("Deadline", "deadline", err)
		}
		pols.Deadline = dl
	}
	if c := cfg.Retry; c != nil {
		cc := *c
		fill(&cc.Name, &cc.MeterProvider, name)
		rt, err := retry.New(cc)
		if err != nil {
			return sectionErr("Retry", "retry", err)
		}
		pols.Retry = rt
	}
	if c := cfg.RateLimit; c != nil {
		cc := *c
		fill(&cc.Name, &cc.MeterProvider, name)
		if cc.MaxWait == 0 && cfg.Retry != nil {
			cc.MaxWait = cmp.Or(cfg.Retry.MaxInterval, 10*time.Second)
		}
		l, err := ratelimit.New(cc)
		if err != nil {
			return sectionErr("RateLimit", "ratelimit", err)
		}
		pols.RateLimit = l
	}
	if c := cfg.Breaker; c != nil {
		cc := *c
		fill(&cc.Name, &cc.MeterProvider, name)
		br, err := breaker.New(cc)
		if err != nil {
			return sectionErr("Breaker", "breaker", err)
		}
		p.owned = append(p.owned, br)
		pols.Breaker = br
	}
	if c := cfg.Attempt; c != nil {
		cc := *c
		fill(&cc.Name, &cc.MeterProvider, name+".attempt")
		at, err := deadline.New(cc)
		if err != nil {
			return sectionErr("Attempt", "deadline", err)
		}
		pols.Attempt = at
	}
	return nil
}

// checkSlots reports a slot set twice.
func checkSlots(cfg Config) error {
	for _, s := range []struct {
		slot          string
		section, used bool
	}{
		{"Bulkhead", cfg.Bulkhead != nil, cfg.Use.Bulkhead != nil},
		{"Deadline", cfg.Deadline != nil, cfg.Use.Deadline != nil},
		{"Retry", cfg.Retry != nil, cfg.Use.Retry != nil},
		{"RateLimit", cfg.RateLimit != nil, cfg.Use.RateLimit != nil},
		{"Breaker", cfg.Breaker != nil, cfg.Use.Breaker != nil},
		{"Attempt", cfg.Attempt != nil, cfg.Use.Attempt != nil},
	} {
		if s.section && s.used {
			return fmt.Errorf("watertight: %s: both %s and Use.%s set", s.slot, s.slot, s.slot)
		}
	}
	switch {
	case cfg.Adaptive != nil && cfg.Bulkhead != nil:
		return errors.New("watertight: Adaptive: both Bulkhead and Adaptive set (they take the same slot)")
	case cfg.Adaptive != nil && cfg.Use.Bulkhead != nil:
		return errors.New("watertight: Adaptive: both Adaptive and Use.Bulkhead set (they take the same slot)")
	}
	return nil
}

// sectionErr puts the section's name in place of the policy package's
// prefix pkg in err's message, and wraps err.
func sectionErr(section, pkg string, err error) error {
	return &configError{msg: "watertight: " + section + ": " + strings.TrimPrefix(err.Error(), pkg+": "), err: err}
}

type configError struct {
	msg string
	err error
}

func (e *configError) Error() string { return e.msg }
func (e *configError) Unwrap() error { return e.err }

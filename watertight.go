package watertight

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/internal/pipeopt"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
	"go.opentelemetry.io/otel/metric"
)

// Config describes a whole pipeline: one section per slot of
// compose.Policies, in the order the calls run through them. A nil section
// means no policy in that slot. The zero Config is valid: a pipeline with
// no policy, which only records the call's span and duration.
//
// New copies each section and never modifies the caller's structs, so one
// Config may serve several pipelines.
type Config struct {
	// Bulkhead limits the calls in flight and waiting (outermost).
	Bulkhead *bulkhead.Config
	// Adaptive takes the Bulkhead slot in Bulkhead's place: a bulkhead
	// that finds its own limit from the latency of each attempt. At most
	// one of Bulkhead, Adaptive and Use.Bulkhead may be set.
	Adaptive *adaptive.Config
	// Deadline bounds the whole call: every attempt and every wait.
	Deadline *deadline.Config
	// Retry repeats failed attempts.
	Retry *retry.Config
	// RateLimit admits each attempt, retries included, at the pace the
	// dependency allows: a hold fed by its rate-limit headers (through
	// [NewHTTPClient]'s Transport) or an error's RetryAfter, and an
	// optional client-side rate. With a Retry section, a zero MaxWait takes
	// its MaxInterval (retry.DefaultMaxInterval if that is 0). A held
	// attempt keeps its Bulkhead slot.
	RateLimit *ratelimit.Config
	// Breaker stops calling a failing dependency; it sees every attempt.
	Breaker *breaker.Config
	// Attempt bounds each attempt (innermost). Its Timeout must not be
	// longer than Deadline's.
	Attempt *deadline.Config

	// Use takes ready policies, slot by slot: a policy shared with other
	// pipelines, a user-written one, or one from another package or module
	// (any policy.Policy). A slot may be set here or by its section above,
	// not both. The Pipeline's Close does not close what Use gave.
	Use compose.Policies
}

// Pipeline is a compose.Pipeline built by [New], with the policies it built
// for its sections. It is a policy.Policy: run calls with its Execute or
// with policy.Do. It is safe for concurrent use by multiple goroutines;
// build one per dependency and share it. The zero value is not usable.
type Pipeline struct {
	*compose.Pipeline

	bulkhead  *bulkhead.Bulkhead
	limiter   *adaptive.Limiter
	breaker   *breaker.Breaker
	rateLimit *ratelimit.Limiter
	owned     []io.Closer // what New built and Close closes
}

// New builds the pipeline named name from cfg. name must not be empty. A
// section's empty Name takes name (the Attempt section's takes
// name + ".attempt"). A section's nil MeterProvider takes the one set by
// opts (compose.WithMeterProvider), if any; opts also configure the
// pipeline's own span and histogram.
//
// An invalid section fails with an error naming it, that wraps the
// policy's own: "watertight: Bulkhead: Config.Limit must be >= 1, got 0".
// So does a slot set both by a section and in Use, and an Attempt timeout
// longer than the Deadline's (a zero deadline.Deadline has no timeout to
// compare). On error New closes whatever it had built.
func New(name string, cfg Config, opts ...compose.Option) (*Pipeline, error) {
	if name == "" {
		return nil, errors.New("watertight: name must not be empty")
	}
	if err := checkSlots(cfg); err != nil {
		return nil, err
	}
	b := builder{mp: pipeopt.Apply(opts).MeterProvider}
	p := &Pipeline{}
	pols := cfg.Use
	if err := b.sections(cfg, name, p, &pols); err != nil {
		p.Close()
		return nil, err
	}
	// Said here, with the sections' names, rather than by compose.
	if d, ok := pols.Deadline.(*deadline.Deadline); ok {
		// A zero Deadline imposes no timeout: nothing to compare with.
		if a, ok := pols.Attempt.(*deadline.Deadline); ok && d.Timeout() > 0 && a.Timeout() > d.Timeout() {
			p.Close()
			return nil, fmt.Errorf("watertight: Attempt: Timeout %v is longer than the Deadline's Timeout %v", a.Timeout(), d.Timeout())
		}
	}
	if p.bulkhead == nil {
		p.bulkhead, _ = pols.Bulkhead.(*bulkhead.Bulkhead)
	}
	if p.limiter == nil {
		p.limiter, _ = pols.Bulkhead.(*adaptive.Limiter)
	}
	if p.breaker == nil {
		p.breaker, _ = pols.Breaker.(*breaker.Breaker)
	}
	if p.rateLimit == nil {
		p.rateLimit, _ = pols.RateLimit.(*ratelimit.Limiter)
	}
	cp, err := compose.New(name, pols, opts...)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("watertight: %w", err)
	}
	p.Pipeline = cp
	return p, nil
}

// Bulkhead returns the *bulkhead.Bulkhead in the Bulkhead slot (built from
// Config.Bulkhead or given in Config.Use), or nil if there is none. It is
// nil on a nil Pipeline.
func (p *Pipeline) Bulkhead() *bulkhead.Bulkhead {
	if p == nil {
		return nil
	}
	return p.bulkhead
}

// Limiter returns the *adaptive.Limiter in the Bulkhead slot (built from
// Config.Adaptive or given in Config.Use), or nil if there is none. It is
// nil on a nil Pipeline.
func (p *Pipeline) Limiter() *adaptive.Limiter {
	if p == nil {
		return nil
	}
	return p.limiter
}

// Breaker returns the *breaker.Breaker in the Breaker slot (built from
// Config.Breaker or given in Config.Use), or nil if there is none. It is nil
// on a nil Pipeline.
func (p *Pipeline) Breaker() *breaker.Breaker {
	if p == nil {
		return nil
	}
	return p.breaker
}

// RateLimit returns the *ratelimit.Limiter in the RateLimit slot (built
// from Config.RateLimit or given in Config.Use), or nil if there is none.
// [NewHTTPClient] feeds it from its Transport's Signals. It is nil on a nil
// Pipeline.
func (p *Pipeline) RateLimit() *ratelimit.Limiter {
	if p == nil {
		return nil
	}
	return p.rateLimit
}

// Close closes every policy New built for the sections of its Config (it
// unregisters their observable instruments), and not those given in
// Config.Use. The Pipeline goes on working afterwards, without those
// instruments. Close is safe on a nil Pipeline, may be called more than
// once, and returns the errors of the policies' Close, joined.
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

func (p *Pipeline) own(c io.Closer) { p.owned = append(p.owned, c) }

// sections builds the policies of cfg's sections into pols, and records in
// p those it owns and returns. On error, what it built is in p, for the
// caller to close.
func (b *builder) sections(cfg Config, name string, p *Pipeline, pols *compose.Policies) error {
	if c := cfg.Bulkhead; c != nil {
		cc := *c
		b.fill(&cc.Name, &cc.MeterProvider, name)
		bh, err := bulkhead.New(cc)
		if err != nil {
			return sectionErr("Bulkhead", "bulkhead", err)
		}
		p.own(bh)
		p.bulkhead, pols.Bulkhead = bh, bh
	}
	if c := cfg.Adaptive; c != nil {
		cc := *c
		b.fill(&cc.Name, &cc.MeterProvider, name)
		l, err := adaptive.New(cc)
		if err != nil {
			return sectionErr("Adaptive", "adaptive", err)
		}
		p.own(l)
		p.limiter, pols.Bulkhead = l, l
	}
	if c := cfg.Deadline; c != nil {
		cc := *c
		b.fill(&cc.Name, &cc.MeterProvider, name)
		dl, err := deadline.New(cc)
		if err != nil {
			return sectionErr("Deadline", "deadline", err)
		}
		pols.Deadline = dl
	}
	if c := cfg.Retry; c != nil {
		cc := *c
		b.fill(&cc.Name, &cc.MeterProvider, name)
		rt, err := retry.New(cc)
		if err != nil {
			return sectionErr("Retry", "retry", err)
		}
		pols.Retry = rt
	}
	if c := cfg.RateLimit; c != nil {
		cc := *c
		b.fill(&cc.Name, &cc.MeterProvider, name)
		if cc.MaxWait == 0 && cfg.Retry != nil {
			cc.MaxWait = cfg.Retry.MaxInterval
			if cc.MaxWait == 0 {
				cc.MaxWait = retry.DefaultMaxInterval
			}
		}
		l, err := ratelimit.New(cc)
		if err != nil {
			return sectionErr("RateLimit", "ratelimit", err)
		}
		p.rateLimit, pols.RateLimit = l, l
	}
	if c := cfg.Breaker; c != nil {
		cc := *c
		b.fill(&cc.Name, &cc.MeterProvider, name)
		br, err := breaker.New(cc)
		if err != nil {
			return sectionErr("Breaker", "breaker", err)
		}
		p.own(br)
		p.breaker, pols.Breaker = br, br
	}
	if c := cfg.Attempt; c != nil {
		cc := *c
		b.fill(&cc.Name, &cc.MeterProvider, name+".attempt")
		at, err := deadline.New(cc)
		if err != nil {
			return sectionErr("Attempt", "deadline", err)
		}
		pols.Attempt = at
	}
	return nil
}

// builder carries what New hands to every section.
type builder struct {
	mp metric.MeterProvider // from opts; nil: none given
}

// fill gives a section's empty Name the name def, and its nil
// MeterProvider the one from opts.
func (b *builder) fill(name *string, mp *metric.MeterProvider, def string) {
	if *name == "" {
		*name = def
	}
	if *mp == nil {
		*mp = b.mp
	}
}

// checkSlots reports a slot set both by a section and in Use.
func checkSlots(cfg Config) error {
	both := []struct {
		slot    string
		section bool
		used    bool
	}{
		{"Bulkhead", cfg.Bulkhead != nil, cfg.Use.Bulkhead != nil},
		{"Deadline", cfg.Deadline != nil, cfg.Use.Deadline != nil},
		{"Retry", cfg.Retry != nil, cfg.Use.Retry != nil},
		{"RateLimit", cfg.RateLimit != nil, cfg.Use.RateLimit != nil},
		{"Breaker", cfg.Breaker != nil, cfg.Use.Breaker != nil},
		{"Attempt", cfg.Attempt != nil, cfg.Use.Attempt != nil},
	}
	for _, s := range both {
		if s.section && s.used {
			return fmt.Errorf("watertight: %s: both %s and Use.%s set", s.slot, s.slot, s.slot)
		}
	}
	if cfg.Adaptive != nil {
		switch {
		case cfg.Bulkhead != nil:
			return errors.New("watertight: Adaptive: both Bulkhead and Adaptive set (they take the same slot)")
		case cfg.Use.Bulkhead != nil:
			return errors.New("watertight: Adaptive: both Adaptive and Use.Bulkhead set (they take the same slot)")
		}
	}
	return nil
}

// sectionErr names the section in a policy's Config error, in place of the
// policy package's own prefix, and wraps it.
func sectionErr(section, pkg string, err error) error {
	return &configError{section: section, msg: strings.TrimPrefix(err.Error(), pkg+": "), err: err}
}

// configError is a section's Config error: "watertight: <Section>: <the
// policy's message>", unwrapping to the policy's error.
type configError struct {
	section, msg string
	err          error
}

func (e *configError) Error() string { return "watertight: " + e.section + ": " + e.msg }
func (e *configError) Unwrap() error { return e.err }

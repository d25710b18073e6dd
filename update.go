package watertight

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

// Change is one setting a [Pipeline.Update] changed: its path in the
// Config's JSON form, such as "bulkhead.limit", and its values before and
// after, in JSON ("" where it was or became unset).
type Change struct {
	Path     string
	Old, New string
}

// updates is a Pipeline's Config in force and what its Update needs.
type updates struct {
	mu       sync.Mutex // serialises Update; no call takes it
	name     string
	mp       metric.MeterProvider
	cfg      atomic.Pointer[Config] // in force: a deep copy, replaced whole
	counter  metric.Int64Counter
	applied  []metric.AddOption
	refused  []metric.AddOption
	onUpdate func(string, []Change)
}

func (u *updates) init(name string, cfg Config, mp metric.MeterProvider) {
	in := deepCopy(cfg)
	u.name, u.mp, u.onUpdate = name, mp, cfg.OnUpdate
	u.cfg.Store(&in)
	u.counter = telemetry.Counter(telemetry.MeterOf(mp), telemetry.MetricUpdates, "{update}",
		"Pipeline updates, by result: applied or refused.")
	opts := func(result string) []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
			telemetry.KeyPipeline.String(name), telemetry.KeyResult.String(result)))}
	}
	u.applied, u.refused = opts("applied"), opts("refused")
}

// Update changes the settings of the policies New built to cfg's
// sections, in place: each policy keeps its state (a breaker's state and
// counts, a rate-limit hold, a learned limit, a route's estimates, a
// retry budget's balance). Each package's documentation says what an
// update does to the calls it holds and to those waiting; no call is cut
// or shed by one.
//
// It is all or nothing: cfg is checked first, as New checks it, and an
// invalid cfg changes nothing and returns the error New returns for it.
// The policies are then updated one by one, in the order calls run
// through them, each as its own Update says: a call in flight during an
// Update may meet the old settings in one policy and the new in the
// next.
//
// cfg must have the sections the pipeline was built with. Update refuses
// to add or remove a section, or to swap Bulkhead and Adaptive, with an
// error naming the section: the pipeline's slots are fixed at New, so
// that a call never pays to look them up. A Route keeps its endpoints, by
// name and in order; a Route with no Endpoints keeps those in force.
// cfg.Use and cfg.OnUpdate are ignored, as are each section's Name,
// MeterProvider and hooks: they stay those New was given.
//
// Each Update is counted in watertight.config.updates, with the
// watertight.update.result "applied" or "refused"; one that changed a
// setting is told to Config.OnUpdate. Update is safe for concurrent use
// with calls and with itself; it does not block calls.
func (p *Pipeline) Update(cfg Config) error {
	u := &p.updates
	u.mu.Lock()
	defer u.mu.Unlock()
	cfg = u.kept(cfg)
	if err := p.apply(cfg); err != nil {
		u.counter.Add(context.Background(), 1, u.refused...)
		return err
	}
	changes := diff(*u.cfg.Load(), cfg)
	u.cfg.Store(&cfg)
	u.counter.Add(context.Background(), 1, u.applied...)
	if len(changes) > 0 && u.onUpdate != nil {
		u.onUpdate(u.name, changes)
	}
	return nil
}

// Config returns the Config in force: the one given to New or to the last
// Update that succeeded, as given, but for what Update keeps as New set
// it (Use, OnUpdate, and each section's Name, hooks, MeterProvider and
// other fields that are not data). The sections are copies: changing
// them changes nothing until they are given to Update. Config takes no
// lock.
func (p *Pipeline) Config() Config { return deepCopy(*p.updates.cfg.Load()) }

// kept returns a copy of cfg with what Update keeps from the Config in
// force: Use, OnUpdate, each section's Name and the fields that are not
// data (hooks, MeterProvider, a retry's Budget, an endpoint's policies),
// and the Route's endpoints if cfg's Route names none. So Config tells
// what is in force.
func (u *updates) kept(cfg Config) Config {
	cfg = deepCopy(cfg)
	in := *u.cfg.Load()
	cfg.Use, cfg.OnUpdate = in.Use, in.OnUpdate
	keep(cfg.Bulkhead, in.Bulkhead, true)
	keep(cfg.Adaptive, in.Adaptive, true)
	keep(cfg.Deadline, in.Deadline, true)
	keep(cfg.Retry, in.Retry, true)
	keep(cfg.RateLimit, in.RateLimit, true)
	keep(cfg.Breaker, in.Breaker, true)
	keep(cfg.Attempt, in.Attempt, true)
	keep(cfg.Route, in.Route, true)
	if cfg.Route != nil && in.Route != nil {
		if len(cfg.Route.Endpoints) == 0 {
			cfg.Route.Endpoints = slices.Clone(in.Route.Endpoints)
		}
		for i := range min(len(cfg.Route.Endpoints), len(in.Route.Endpoints)) {
			keep(&cfg.Route.Endpoints[i], &in.Route.Endpoints[i], false) // names are checked, not kept
		}
	}
	return cfg
}

// keep sets, in the section c, the fields of the section in force that an
// update keeps: those that are not data (tagged json:"-"), and the Name
// if name.
func keep[C any](c, in *C, name bool) {
	if c == nil || in == nil {
		return
	}
	cv, iv := reflect.ValueOf(c).Elem(), reflect.ValueOf(in).Elem()
	for i := range cv.NumField() {
		if f := cv.Type().Field(i); name && f.Name == "Name" || f.Tag.Get("json") == "-" {
			cv.Field(i).Set(iv.Field(i))
		}
	}
}

// apply checks cfg and updates the policies New built.
func (p *Pipeline) apply(cfg Config) error {
	u := &p.updates
	if err := sameSections(*u.cfg.Load(), cfg); err != nil {
		return err
	}
	// The check builds the pipeline cfg describes and drops it, so that an
	// update is refused exactly when New would refuse cfg, with instruments
	// that report nothing.
	check, err := New(u.name, unmetered(cfg), compose.WithMeterProvider(metricnoop.NewMeterProvider()))
	if err != nil {
		return err
	}
	check.Close()
	pols := p.pols
	secs := sections(cfg, u.name, u.mp, &pols)
	if cfg.Route != nil {
		secs = secs[:4] // the rest are each endpoint's
	}
	for _, s := range secs {
		if s.set {
			if err := s.update(*s.dst); err != nil {
				return err
			}
		}
	}
	if cfg.Route != nil {
		return p.updateRoute(cfg)
	}
	return nil
}

// updateRoute updates the router and the policies New built for each of
// its endpoints.
func (p *Pipeline) updateRoute(cfg Config) error {
	u := &p.updates
	r, ok := any(p.pols.Route).(interface{ Update(route.Config) error })
	if !ok {
		return errors.New("watertight: Route: the router cannot be updated")
	}
	if err := r.Update(*cfg.Route); err != nil {
		return fmt.Errorf("watertight: Route: %w", err)
	}
	for i, ep := range cfg.Route.Endpoints {
		var none compose.Policies
		secs := sections(endpointSections(cfg, "."+ep.Name), u.name+"."+ep.Name, u.mp, &none)[4:]
		for k, pol := range p.endpoints[i] {
			if pol == nil {
				continue
			}
			if err := secs[k].update(pol); err != nil {
				return err
			}
		}
	}
	return nil
}

// unmetered returns a copy of cfg whose sections take the pipeline's
// MeterProvider.
func unmetered(cfg Config) Config {
	cfg = deepCopy(cfg)
	for _, m := range []*metric.MeterProvider{field(cfg.Bulkhead, func(c *bulkhead.Config) *metric.MeterProvider { return &c.MeterProvider }),
		field(cfg.Adaptive, func(c *adaptive.Config) *metric.MeterProvider { return &c.MeterProvider }),
		field(cfg.Deadline, func(c *deadline.Config) *metric.MeterProvider { return &c.MeterProvider }),
		field(cfg.Retry, func(c *retry.Config) *metric.MeterProvider { return &c.MeterProvider }),
		field(cfg.RateLimit, func(c *ratelimit.Config) *metric.MeterProvider { return &c.MeterProvider }),
		field(cfg.Breaker, func(c *breaker.Config) *metric.MeterProvider { return &c.MeterProvider }),
		field(cfg.Attempt, func(c *deadline.Config) *metric.MeterProvider { return &c.MeterProvider }),
		field(cfg.Route, func(c *route.Config) *metric.MeterProvider { return &c.MeterProvider })} {
		if m != nil {
			*m = nil
		}
	}
	return cfg
}

// field returns f of c, or nil if c is nil.
func field[C, F any](c *C, f func(*C) *F) *F {
	if c == nil {
		return nil
	}
	return f(c)
}

// sameSections reports a section of cfg set where in force it is not, or
// the other way round, and what a policy's Update refuses that New does
// not: a Route's endpoints renamed, added or removed, a breaker's slow
// rule turned on or off, a fair share turned on or off. So Update refuses cfg before it changes any
// policy.
func sameSections(in, cfg Config) error {
	var a, b compose.Policies
	was, now := sections(in, "", nil, &a), sections(cfg, "", nil, &b)
	for i := range was {
		switch {
		case now[i].set && !was[i].set:
			return fmt.Errorf("watertight: %s: the pipeline has no %s section, and a section cannot be added at run time: build a new pipeline", now[i].name, now[i].name)
		case was[i].set && !now[i].set:
			return fmt.Errorf("watertight: %s: the pipeline has a %s section, and a section cannot be removed at run time: build a new pipeline", was[i].name, was[i].name)
		}
	}
	if (in.Route == nil) != (cfg.Route == nil) {
		return errors.New("watertight: Route: a Route cannot be added or removed at run time: build a new pipeline")
	}
	if in.Breaker != nil && cfg.Breaker != nil && (in.Breaker.SlowCallRatio > 0) != (cfg.Breaker.SlowCallRatio > 0) {
		return fmt.Errorf("watertight: Breaker: Config.SlowCallRatio cannot turn the slow rule on or off at run time (from %v to %v): build a new pipeline",
			in.Breaker.SlowCallRatio, cfg.Breaker.SlowCallRatio)
	}
	if in.Route != nil && !slices.EqualFunc(in.Route.Endpoints, cfg.Route.Endpoints, func(a, b route.Endpoint) bool { return a.Name == b.Name }) {
		return fmt.Errorf("watertight: Route: Config.Endpoints %v are not those in force, %v: the endpoints are fixed at New; build a new pipeline",
			names(cfg.Route.Endpoints), names(in.Route.Endpoints))
	}
	return sameFairShare(in, cfg)
}

// sameFairShare reports a bulkhead's or an adaptive limiter's FairShare
// changed: its waiters are filed by key or not as they queue, so it is
// fixed at New.
func sameFairShare(in, cfg Config) error {
	var was, now bool
	switch {
	case in.Bulkhead != nil && cfg.Bulkhead != nil:
		was, now = in.Bulkhead.FairShare, cfg.Bulkhead.FairShare
	case in.Adaptive != nil && cfg.Adaptive != nil:
		was, now = in.Adaptive.FairShare, cfg.Adaptive.FairShare
	}
	if was != now {
		return fmt.Errorf("watertight: Config.FairShare cannot be changed at run time (from %v to %v): build a new pipeline", was, now)
	}
	return nil
}

func names(eps []route.Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Name
	}
	return out
}

// deepCopy returns cfg with sections, maps and endpoints of its own.
func deepCopy(cfg Config) Config {
	cfg.Bulkhead, cfg.Adaptive = clone(cfg.Bulkhead), clone(cfg.Adaptive)
	cfg.Deadline, cfg.Retry, cfg.RateLimit = clone(cfg.Deadline), clone(cfg.Retry), clone(cfg.RateLimit)
	cfg.Breaker, cfg.Attempt, cfg.Route = clone(cfg.Breaker), clone(cfg.Attempt), clone(cfg.Route)
	if cfg.Bulkhead != nil {
		cfg.Bulkhead.Reserve = maps.Clone(cfg.Bulkhead.Reserve)
	}
	if cfg.Adaptive != nil {
		cfg.Adaptive.Reserve = maps.Clone(cfg.Adaptive.Reserve)
	}
	if cfg.Route != nil {
		cfg.Route.Endpoints = slices.Clone(cfg.Route.Endpoints)
	}
	return cfg
}

func clone[T any](c *T) *T {
	if c == nil {
		return nil
	}
	cp := *c
	return &cp
}

// diff returns the settings that differ between a and b, by their paths
// in the Config's JSON form, in order.
func diff(a, b Config) []Change {
	was, now := flatten(a), flatten(b)
	var out []Change
	for _, path := range slices.Sorted(maps.Keys(union(was, now))) {
		if was[path] != now[path] {
			out = append(out, Change{Path: path, Old: was[path], New: now[path]})
		}
	}
	return out
}

func union(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// flatten returns cfg's JSON form as a value per path.
func flatten(cfg Config) map[string]string {
	out := map[string]string{}
	data, err := json.Marshal(cfg)
	if err != nil {
		return out
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if d.Decode(&v) == nil {
		walk("", v, out)
	}
	return out
}

func walk(path string, v any, out map[string]string) {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			walk(join(k), e, out)
		}
	case []any:
		for i, e := range v {
			walk(join(fmt.Sprint(i)), e, out)
		}
	default:
		b, _ := json.Marshal(v)
		out[path] = string(b)
	}
}

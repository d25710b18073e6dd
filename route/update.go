package route

import (
	"fmt"
	"slices"
)

// settings are a Router's settings, with defaults filled, as a pick reads
// them. They never change: Update replaces them whole, so that a pick
// reads all old or all new ones.
type settings struct {
	cfg        Config  // as given, with the Name, MeterProvider and policies New was given
	decay      float64 // ns
	ramp       int64   // Decay, in ns: a returned endpoint's ramp
	factor     float64 // < 0: no ejection
	maxEjected int32
	probeEvery int64
	eps        []endpointSettings
}

// endpointSettings are the settings of one endpoint.
type endpointSettings struct {
	weight float64
	limit  int64 // MaxConcurrent; 0: no cap
}

// newSettings returns the settings of cfg, a valid Config.
func newSettings(cfg Config) *settings {
	d := cfg.withDefaults()
	n := len(d.Endpoints)
	s := &settings{
		cfg:        cfg,
		decay:      float64(d.Decay),
		ramp:       int64(d.Decay),
		factor:     d.OutlierFactor,
		maxEjected: int32(min(max(int(d.MaxEjectedShare*float64(n)), 1), n-1)),
		probeEvery: int64(d.ProbeInterval),
		eps:        make([]endpointSettings, n),
	}
	for i, ep := range d.Endpoints {
		s.eps[i] = endpointSettings{weight: ep.Weight, limit: int64(ep.MaxConcurrent)}
		if ep.Weight == 0 {
			s.eps[i].weight = 1
		}
	}
	return s
}

// Update changes the router's settings to cfg's, checked as New checks
// them: an invalid cfg changes nothing and returns the error New returns
// for it, naming the field. Name and MeterProvider stay those New was
// given; cfg's are ignored.
//
// The endpoints are fixed at New: cfg.Endpoints must name the same
// endpoints in the same order, or Update returns an error naming
// Config.Endpoints. Their RateLimit, Breaker and Attempt stay those New
// was given, and cfg's are ignored: a pipeline builds each endpoint's
// chain of policies once, and each of those policies has its own Update.
// To add or remove an endpoint, build a new Router.
//
// Each endpoint's Weight and MaxConcurrent, Decay, OutlierFactor,
// MaxEjectedShare and ProbeInterval hold for the picks after Update
// returns. An attempt already picked ends under the settings of its pick,
// and is never cut short: an endpoint over a lowered MaxConcurrent takes
// no new attempt until its attempts in flight drop below it. An ejected
// or refused endpoint stays out until a probe brings it back, even if a
// raised OutlierFactor or MaxEjectedShare would no longer eject it; the
// probe is judged by the new OutlierFactor. A probe already due at a time
// keeps it; the waits after it follow the new ProbeInterval. A returned
// endpoint's weight goes on rising from its return, to the new Weight,
// over the new Decay. Latency estimates, calls in flight, ejections and
// probes carry over.
//
// Update is safe for concurrent use with calls and with itself.
func (r *Router) Update(cfg Config) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	given := r.set.Load().cfg
	cfg.Name, cfg.MeterProvider = given.Name, given.MeterProvider
	cfg.Endpoints = slices.Clone(cfg.Endpoints)
	for i := range min(len(cfg.Endpoints), len(given.Endpoints)) {
		e, g := &cfg.Endpoints[i], given.Endpoints[i]
		e.RateLimit, e.Breaker, e.Attempt = g.RateLimit, g.Breaker, g.Attempt
	}
	if err := cfg.withDefaults().validate(); err != nil {
		return err
	}
	if err := sameEndpoints(cfg.Endpoints, given.Endpoints); err != nil {
		return err
	}
	r.set.Store(newSettings(cfg))
	return nil
}

// sameEndpoints returns an error unless eps name the endpoints of given,
// in its order.
func sameEndpoints(eps, given []Endpoint) error {
	const why = "a Router's endpoints are fixed at New, since a pipeline builds each one's policies once; build a new Router to change them"
	if len(eps) != len(given) {
		return fmt.Errorf("route: Config.Endpoints holds %d endpoints, not the %d New was given: %s", len(eps), len(given), why)
	}
	for i := range eps {
		if eps[i].Name != given[i].Name {
			return fmt.Errorf("route: Config.Endpoints[%d].Name is %q, not %q as New was given: %s", i, eps[i].Name, given[i].Name, why)
		}
	}
	return nil
}

// Config returns the Config in force: the one given to New or to the last
// Update that succeeded, with the Name, MeterProvider and endpoint
// policies New was given.
func (r *Router) Config() Config {
	cfg := r.set.Load().cfg
	cfg.Endpoints = slices.Clone(cfg.Endpoints)
	return cfg
}

package route

import (
	"errors"
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/internal/nilcheck"
	"github.com/watertight/watertight/policy"
)

// MaxEndpoints is the most endpoints a [Router] takes: a call keeps the
// endpoints it tried in one 64-bit set.
const MaxEndpoints = 64

// maxProbeInterval bounds Config.ProbeInterval, so that ten times it, the
// longest wait between probes, is a time; and Config.Decay.
const maxProbeInterval = 24 * time.Hour

// minWeight is the least Endpoint.Weight, and its inverse the most: the
// load scores of endpoints a million times apart stay finite numbers.
const minWeight = 0.001

// Config configures a [Router]. The zero value of each field but Endpoints
// means its default.
type Config struct {
	// Name names the router in its errors and telemetry. It must not be
	// empty.
	Name string
	// Endpoints are the equivalent endpoints calls are spread over: at
	// least 1, at most [MaxEndpoints], with distinct names.
	Endpoints []Endpoint

	// Decay is how long an endpoint's latency estimate takes to forget
	// most of a latency: the time constant of its peak EWMA, and how long a
	// returned endpoint's weight takes to ramp up. 0 means 10s; at most
	// 24h.
	Decay time.Duration
	// OutlierFactor ejects an endpoint whose latency estimate is more than
	// OutlierFactor times another's, and more than 100ms above it. 0
	// means 4; it must be > 1, or negative for no ejection.
	OutlierFactor float64
	// MaxEjectedShare is the share of the endpoints that may be ejected at
	// once, rounded down, but at least 1 of 2 or more, and never all. 0
	// means 0.5; it must be at most 1.
	MaxEjectedShare float64
	// ProbeInterval is how often an endpoint that is out (ejected, or
	// refused by its own policies) gets a call to test it, at first: the
	// wait doubles after each probe that ran and failed to bring it back,
	// up to ten times ProbeInterval. 0 means 1s; at most 24h.
	ProbeInterval time.Duration

	// MeterProvider provides the router's instruments. Nil means the
	// global MeterProvider.
	MeterProvider metric.MeterProvider
}

// Endpoint is one of the equivalent endpoints of a [Router], with the
// policies only its calls run through, in this order. A nil policy is
// skipped.
type Endpoint struct {
	// Name names the endpoint in telemetry and to fn. It must not be
	// empty. It must not hold a secret: it is a metric attribute.
	Name string
	// Weight is the endpoint's share of the load beside the others: one
	// of weight 2 takes as many calls in flight as two of weight 1 at the
	// same latency. 0 means 1; else it must be from 0.001 to 1000.
	Weight float64
	// MaxConcurrent caps the endpoint's calls in flight. 0 means no cap;
	// it must not be negative.
	MaxConcurrent int

	// RateLimit admits the endpoint's attempts (usually a
	// *ratelimit.Limiter, fed by its own answers). While its hold is on,
	// the router sends calls elsewhere.
	RateLimit policy.Policy
	// Breaker stops calling the endpoint while it fails (usually a
	// *breaker.Breaker or a redisstate.SharedBreaker). While it refuses,
	// the router sends calls elsewhere.
	Breaker policy.Policy
	// Attempt bounds each attempt on the endpoint (usually a
	// *deadline.Deadline).
	Attempt policy.Policy
}

// Policies returns e's policies in the order a call runs through them.
func (e Endpoint) Policies() [3]policy.Policy {
	return [3]policy.Policy{e.RateLimit, e.Breaker, e.Attempt}
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Decay == 0 {
		c.Decay = 10 * time.Second
	}
	if c.OutlierFactor == 0 {
		c.OutlierFactor = 4
	}
	if c.MaxEjectedShare == 0 {
		c.MaxEjectedShare = 0.5
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = time.Second
	}
	return c
}

// validate returns an error naming the first invalid field of c.
func (c Config) validate() error {
	switch {
	case c.Name == "":
		return errors.New("route: Config.Name must not be empty")
	case len(c.Endpoints) == 0:
		return errors.New("route: Config.Endpoints must not be empty")
	case len(c.Endpoints) > MaxEndpoints:
		return fmt.Errorf("route: Config.Endpoints holds %d endpoints, more than %d", len(c.Endpoints), MaxEndpoints)
	case c.Decay < 0 || c.Decay > maxProbeInterval:
		return fmt.Errorf("route: Config.Decay must be >= 0 and at most %v, got %v", maxProbeInterval, c.Decay)
	case math.IsNaN(c.OutlierFactor) || math.IsInf(c.OutlierFactor, 0) || (c.OutlierFactor >= 0 && c.OutlierFactor <= 1):
		return fmt.Errorf("route: Config.OutlierFactor must be > 1, or negative for none, got %v", c.OutlierFactor)
	case !(c.MaxEjectedShare > 0 && c.MaxEjectedShare <= 1):
		return fmt.Errorf("route: Config.MaxEjectedShare must be in (0, 1], got %v", c.MaxEjectedShare)
	case c.ProbeInterval < 0 || c.ProbeInterval > maxProbeInterval:
		return fmt.Errorf("route: Config.ProbeInterval must be >= 0 and at most %v, got %v", maxProbeInterval, c.ProbeInterval)
	}
	seen := make(map[string]int, len(c.Endpoints))
	for i, e := range c.Endpoints {
		if j, dup := seen[e.Name]; dup && e.Name != "" {
			return fmt.Errorf("route: Config.Endpoints[%d].Name %q is also Endpoints[%d]'s", i, e.Name, j)
		}
		seen[e.Name] = i
		if err := e.validate(); err != nil {
			return fmt.Errorf("route: Config.Endpoints[%d].%w", i, err)
		}
	}
	return nil
}

func (e Endpoint) validate() error {
	switch {
	case e.Name == "":
		return errors.New("Name must not be empty")
	case e.Weight != 0 && !(e.Weight >= minWeight && e.Weight <= 1/minWeight):
		return fmt.Errorf("Weight must be 0 (1) or from %v to %v, got %v", minWeight, 1/minWeight, e.Weight)
	case e.MaxConcurrent < 0:
		return fmt.Errorf("MaxConcurrent must be >= 0 (0 means no cap), got %d", e.MaxConcurrent)
	}
	for k, p := range e.Policies() {
		field := [3]string{"RateLimit", "Breaker", "Attempt"}[k]
		if p == nil {
			continue
		}
		// A typed nil pointer would panic on the first call.
		if nilcheck.Pointer(p) {
			return fmt.Errorf("%s is a nil %T; leave it nil to skip it", field, p)
		}
		if _, ok := p.(*adaptive.Limiter); ok {
			return fmt.Errorf("%s holds a %T, which works only in a pipeline's Bulkhead slot", field, p)
		}
	}
	return nil
}

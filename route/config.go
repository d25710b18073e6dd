package route

import (
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/internal/fielderr"
	"github.com/watertight/watertight/internal/jsonconf"
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
//
// Config reads and writes JSON: {"endpoints": [{"name": "eu", "weight":
// 2}, {"name": "us", "max_concurrent": 10}], "decay": "5s"}. The keys are
// the json tags and durations are Go duration strings; zero fields are
// left out. MeterProvider and each Endpoint's policies are not data: they
// are neither written nor read. Reading accepts an empty Name, which
// watertight.New fills in and New refuses.
type Config struct {
	// Name names the router in its errors and telemetry. It must not be
	// empty.
	Name string `json:"name"`
	// Endpoints are the equivalent endpoints calls are spread over: at
	// least 1, at most [MaxEndpoints], with distinct names. They are fixed
	// at New: [Router.Update] changes their Weight and MaxConcurrent only.
	Endpoints []Endpoint `json:"endpoints"`

	// Decay is how long an endpoint's latency estimate takes to forget
	// most of a latency: the time constant of its peak EWMA, and how long a
	// returned endpoint's weight takes to ramp up. 0 means 10s; at most
	// 24h.
	Decay time.Duration `json:"decay"`
	// OutlierFactor ejects an endpoint whose latency estimate is more than
	// OutlierFactor times another's, and more than 100ms above it. 0
	// means 4; it must be > 1, or negative for no ejection.
	OutlierFactor float64 `json:"outlier_factor"`
	// MaxEjectedShare is the share of the endpoints that may be ejected at
	// once, rounded down, but at least 1 of 2 or more, and never all. 0
	// means 0.5; it must be at most 1.
	MaxEjectedShare float64 `json:"max_ejected_share"`
	// ProbeInterval is how often an endpoint that is out (ejected, or
	// refused by its own policies) gets a call to test it, at first: the
	// wait doubles after each probe that ran and failed to bring it back,
	// up to ten times ProbeInterval. 0 means 1s; at most 24h.
	ProbeInterval time.Duration `json:"probe_interval"`

	// MeterProvider provides the router's instruments. Nil means the
	// global MeterProvider.
	MeterProvider metric.MeterProvider `json:"-"`
}

// MarshalJSON returns c's data fields as a JSON object.
func (c Config) MarshalJSON() ([]byte, error) { return jsonconf.Marshal(c) }

// UnmarshalJSON reads the JSON object data into c. It refuses what [New]
// refuses but an empty Name and no Endpoints, which package watertight
// fills in (the pipeline's name; an HTTP client's endpoints, or on an
// update those in force), with an error naming the JSON field:
// "endpoints[1].weight: must be 0 (1) or from 0.001 to 1000, got 5000". A
// key data leaves out leaves its field as it was; on error c is
// unchanged.
func (c *Config) UnmarshalJSON(data []byte) error {
	return jsonconf.Read(data, c, func(c Config) error {
		if c.Name == "" {
			c.Name = "-" // New's to refuse, or watertight.New's to fill in
		}
		if len(c.Endpoints) == 0 {
			c.Endpoints = []Endpoint{{Name: "-"}} // likewise
		}
		return c.withDefaults().validate()
	})
}

// Endpoint is one of the equivalent endpoints of a [Router], with the
// policies only its calls run through, in this order. A nil policy is
// skipped. Its policies are not data: JSON holds its name, weight and
// cap alone.
type Endpoint struct {
	// Name names the endpoint in telemetry and to fn. It must not be
	// empty. It must not hold a secret: it is a metric attribute.
	Name string `json:"name,omitzero"`
	// Weight is the endpoint's share of the load beside the others: one
	// of weight 2 takes as many calls in flight as two of weight 1 at the
	// same latency. 0 means 1; else it must be from 0.001 to 1000.
	Weight float64 `json:"weight,omitzero"`
	// MaxConcurrent caps the endpoint's calls in flight. 0 means no cap;
	// it must not be negative.
	MaxConcurrent int `json:"max_concurrent,omitzero"`

	// RateLimit admits the endpoint's attempts (usually a
	// *ratelimit.Limiter, fed by its own answers). While its hold is on,
	// the router sends calls elsewhere.
	RateLimit policy.Policy `json:"-"`
	// Breaker stops calling the endpoint while it fails (usually a
	// *breaker.Breaker or a redisstate.SharedBreaker). While it refuses,
	// the router sends calls elsewhere.
	Breaker policy.Policy `json:"-"`
	// Attempt bounds each attempt on the endpoint (usually a
	// *deadline.Deadline).
	Attempt policy.Policy `json:"-"`
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
		return fielderr.New("route", "Name", "must not be empty")
	case len(c.Endpoints) == 0:
		return fielderr.New("route", "Endpoints", "must not be empty")
	case len(c.Endpoints) > MaxEndpoints:
		return fielderr.New("route", "Endpoints", "holds %d endpoints, more than %d", len(c.Endpoints), MaxEndpoints)
	case c.Decay < 0 || c.Decay > maxProbeInterval:
		return fielderr.New("route", "Decay", "must be >= 0 and at most %v, got %v", maxProbeInterval, c.Decay)
	case math.IsNaN(c.OutlierFactor) || math.IsInf(c.OutlierFactor, 0) || (c.OutlierFactor >= 0 && c.OutlierFactor <= 1):
		return fielderr.New("route", "OutlierFactor", "must be > 1, or negative for none, got %v", c.OutlierFactor)
	case !(c.MaxEjectedShare > 0 && c.MaxEjectedShare <= 1):
		return fielderr.New("route", "MaxEjectedShare", "must be in (0, 1], got %v", c.MaxEjectedShare)
	case c.ProbeInterval < 0 || c.ProbeInterval > maxProbeInterval:
		return fielderr.New("route", "ProbeInterval", "must be >= 0 and at most %v, got %v", maxProbeInterval, c.ProbeInterval)
	}
	seen := make(map[string]int, len(c.Endpoints))
	for i, e := range c.Endpoints {
		if j, dup := seen[e.Name]; dup && e.Name != "" {
			return fielderr.New("route", fmt.Sprintf("Endpoints[%d].Name", i), "%q is also endpoint %d's", e.Name, j)
		}
		seen[e.Name] = i
		if field, msg := e.validate(); field != "" {
			return fielderr.New("route", fmt.Sprintf("Endpoints[%d].%s", i, field), "%s", msg)
		}
	}
	return nil
}

// validate returns the first invalid field of e and what is wrong with
// it, or "".
func (e Endpoint) validate() (field, msg string) {
	switch {
	case e.Name == "":
		return "Name", "must not be empty"
	case e.Weight != 0 && !(e.Weight >= minWeight && e.Weight <= 1/minWeight):
		return "Weight", fmt.Sprintf("must be 0 (1) or from %v to %v, got %v", minWeight, 1/minWeight, e.Weight)
	case e.MaxConcurrent < 0:
		return "MaxConcurrent", fmt.Sprintf("must be >= 0 (0 means no cap), got %d", e.MaxConcurrent)
	}
	for k, p := range e.Policies() {
		field := [3]string{"RateLimit", "Breaker", "Attempt"}[k]
		if p == nil {
			continue
		}
		// A typed nil pointer would panic on the first call.
		if nilcheck.Pointer(p) {
			return field, fmt.Sprintf("is a nil %T; leave it nil to skip it", p)
		}
		if _, ok := p.(*adaptive.Limiter); ok {
			return field, fmt.Sprintf("holds a %T, which works only in a pipeline's Bulkhead slot", p)
		}
	}
	return "", ""
}

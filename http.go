package watertight

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/hedge"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/internal/pipeopt"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/route"
)

// HTTPOptions are the settings of the httppolicy.Transport that
// [NewHTTPClient] builds. The zero value is valid.
type HTTPOptions struct {
	// IsFailure is httppolicy.Transport.IsFailure (nil: 5xx, 408, 429).
	IsFailure func(*http.Response) bool

	// RetryUnsafe, PropagatePriority, Key, FirstByteTimeout, IdleTimeout,
	// KeepaliveEvents and StreamEnd are the httppolicy.Transport fields of
	// the same names. A timeout must be >= 0; 0 turns it off. A StreamEnd
	// must not be empty. Key reads the request as the caller made it,
	// before an endpoint is picked: with Endpoints, httppolicy.KeyByHost
	// gives the caller's host, not the endpoint's (each endpoint's own
	// Breaker is the per-endpoint one).
	RetryUnsafe       bool
	PropagatePriority bool
	Key               func(*http.Request) string
	FirstByteTimeout  time.Duration
	IdleTimeout       time.Duration
	KeepaliveEvents   []string
	StreamEnd         *httppolicy.StreamEnd

	// Base, if set, sends each attempt in place of the connection pool
	// NewHTTPClient builds: bring your own transport (TLS, proxy or
	// instrumentation settings). Its connections are then yours to cap.
	// Client.Close closes its idle connections if it has a
	// CloseIdleConnections method.
	Base http.RoundTripper

	// Endpoints, if set, routes the requests over equivalent endpoints
	// (see package route): each attempt goes to one of them, with its URL
	// and headers, over a connection pool of its own (its MaxConcurrent,
	// else sized as the client's), and its answers feed its own RateLimit.
	// The route's settings come from Config.Route, whose Endpoints must
	// then be empty. The client does not follow redirects: the caller gets
	// the 3xx, whose Location is the endpoint's. A response's Request is
	// the request sent, with the endpoint's URL and the caller's headers.
	Endpoints []HTTPEndpoint

	// Hedge, if set, hedges the requests that are safe to send twice: the
	// client's Transport is an httppolicy.Hedging around the
	// httppolicy.Transport, so each attempt is a whole call of the
	// pipeline, with its own bulkhead slot.
	Hedge *hedge.Hedge
}

// HTTPEndpoint is one endpoint of a routed [Client]: the route.Endpoint
// (its name, weight, cap and any policies of its own) and where its
// requests go (see httppolicy.Endpoint).
type HTTPEndpoint struct {
	route.Endpoint
	BaseURL string
	Header  http.Header
}

// Client is an *http.Client whose every request runs through Pipeline,
// over a connection pool of its own. It is safe for concurrent use.
type Client struct {
	*http.Client
	// Pipeline runs one call per request, which lasts until the response
	// body has been read to its end or closed.
	Pipeline *Pipeline

	base  http.RoundTripper
	tr    *httppolicy.Transport
	mu    sync.Mutex // serialises Update
	pools []*pool    // the pools NewHTTPClient built: one, or one per endpoint
}

// routed returns cfg with a Route of h's endpoints, or cfg if h has none.
func routed(cfg Config, h HTTPOptions) (Config, error) {
	switch {
	case len(h.Endpoints) == 0 && (cfg.Route != nil || cfg.Use.Route != nil):
		return cfg, errors.New("watertight: a Route needs HTTPOptions.Endpoints, the endpoints with their URLs")
	case len(h.Endpoints) == 0:
		return cfg, nil
	}
	var rc route.Config
	if cfg.Route != nil {
		if len(cfg.Route.Endpoints) > 0 {
			return cfg, errors.New("watertight: HTTPOptions.Endpoints and Config.Route.Endpoints are both set: give the endpoints, with their URLs, in HTTPOptions.Endpoints")
		}
		rc = *cfg.Route
	}
	for _, e := range h.Endpoints {
		rc.Endpoints = append(rc.Endpoints, e.Endpoint)
	}
	cfg.Route = &rc
	return cfg, nil
}

// endpoints returns the httppolicy.Endpoints of p's router for h, each
// over h.Base or a pool of its own, and those pools.
func endpoints(p *Pipeline, h HTTPOptions) (*httppolicy.Endpoints, []*pool, error) {
	r := p.Router()
	eps := make([]httppolicy.Endpoint, len(h.Endpoints))
	var pools []*pool
	for i, e := range r.Endpoints() {
		base := h.Base
		if base == nil {
			pl := newPool(cmp.Or(e.MaxConcurrent, poolCap(p)))
			base, pools = pl, append(pools, pl)
		}
		rl, _ := e.RateLimit.(*ratelimit.Limiter)
		eps[i] = httppolicy.Endpoint{Name: e.Name, BaseURL: h.Endpoints[i].BaseURL, Header: h.Endpoints[i].Header,
			Base: base, Signals: httppolicy.LimiterSignals(rl)}
	}
	out, err := httppolicy.NewEndpoints(r, eps)
	if err != nil {
		return nil, nil, fmt.Errorf("watertight: HTTPOptions.%s", strings.TrimPrefix(err.Error(), "httppolicy: "))
	}
	return out, pools, nil
}

// NewHTTPClient builds the pipeline named name from cfg, as [New] does, and
// a Client whose Transport runs every request through it. The Transport is
// an httppolicy.Transport with the settings of h. Unless h.Base is set,
// the connection pool is httppolicy.NewDependencyTransport sized to the
// bulkhead's Limit (or the adaptive limiter's MaxLimit); without either,
// it has http.DefaultTransport's settings. The client has no Timeout of its own.
// If the RateLimit slot holds a *ratelimit.Limiter, every response's
// rate-limit headers feed it.
//
// NewHTTPClient fails as New does, and if a timeout in h is negative, its
// StreamEnd is invalid, an endpoint's BaseURL is invalid (the error names
// it), or cfg has a Route without h.Endpoints. Call [Client.Close] when
// done with the client.
func NewHTTPClient(name string, cfg Config, h HTTPOptions, opts ...compose.Option) (*Client, error) {
	switch {
	case h.FirstByteTimeout < 0:
		return nil, fmt.Errorf("watertight: HTTPOptions.FirstByteTimeout must be >= 0 (0 means none), got %v", h.FirstByteTimeout)
	case h.IdleTimeout < 0:
		return nil, fmt.Errorf("watertight: HTTPOptions.IdleTimeout must be >= 0 (0 means none), got %v", h.IdleTimeout)
	case h.StreamEnd != nil && *h.StreamEnd == (httppolicy.StreamEnd{}):
		return nil, errors.New("watertight: HTTPOptions.StreamEnd is empty: set its Event, Data or both")
	case h.StreamEnd != nil && (len(h.StreamEnd.Event) > 64 || len(h.StreamEnd.Data) > 64):
		return nil, errors.New("watertight: HTTPOptions.StreamEnd fields must be at most 64 bytes")
	}
	cfg, err := routed(cfg, h)
	if err != nil {
		return nil, err
	}
	p, err := New(name, cfg, opts...)
	if err != nil {
		return nil, err
	}
	base := h.Base
	signals := httppolicy.LimiterSignals(p.RateLimit())
	var pools []*pool
	if len(h.Endpoints) > 0 {
		eps, ps, err := endpoints(p, h)
		if err != nil {
			p.Close()
			return nil, err
		}
		base, signals, pools = eps, eps, ps
	} else if base == nil {
		pl := newPool(poolCap(p))
		base, pools = pl, []*pool{pl}
	}
	tr := &httppolicy.Transport{
		Base:              base,
		Policy:            p,
		IsFailure:         h.IsFailure,
		RetryUnsafe:       h.RetryUnsafe,
		PropagatePriority: h.PropagatePriority,
		Key:               h.Key,
		FirstByteTimeout:  h.FirstByteTimeout,
		IdleTimeout:       h.IdleTimeout,
		KeepaliveEvents:   h.KeepaliveEvents,
		StreamEnd:         h.StreamEnd,
		Name:              name,
		MeterProvider:     pipeopt.Apply(opts).MeterProvider,
		Signals:           signals,
	}
	var rt http.RoundTripper = tr
	if h.Hedge != nil {
		rt = &httppolicy.Hedging{Base: rt, Hedge: h.Hedge, IsFailure: h.IsFailure}
	}
	hc := &http.Client{Transport: rt}
	if len(h.Endpoints) > 0 {
		// A redirect's Location is an endpoint's, and another pick would
		// send it to another: the caller gets the 3xx.
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return &Client{Client: hc, Pipeline: p, base: base, tr: tr, pools: pools}, nil
}

// Close closes the client's idle connections and its Pipeline. It is safe
// on a nil Client and may be called more than once; the client keeps
// working afterwards.
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	if b, ok := c.base.(interface{ CloseIdleConnections() }); ok {
		b.CloseIdleConnections()
	}
	return c.Pipeline.Close()
}

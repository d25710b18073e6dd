package httppolicy

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/watertight/watertight/route"
)

// Endpoint is where a routed request goes: one endpoint of a
// route.Router, by name.
type Endpoint struct {
	// Name is the route.Endpoint's name.
	Name string
	// BaseURL is the endpoint's scheme, host and optional path prefix,
	// such as https://eu.example.com/openai/deployments/chat. A request's
	// path is appended to the prefix, as escaped (a %2F stays one), and its
	// query kept: a request for /v1/chat/completions?x=1 goes to
	// https://eu.example.com/openai/deployments/chat/v1/chat/completions?x=1.
	// It must have no user info, query or fragment.
	BaseURL string
	// Header is set on each request sent to the endpoint, in place of the
	// request's values of the same keys: an API key, an api-version.
	// Its values never appear in an error.
	Header http.Header
	// Base sends the endpoint's requests: its own connection pool. Nil
	// means http.DefaultTransport.
	Base http.RoundTripper
	// Signals, if not nil, is told of every response the endpoint sends,
	// such as LimiterSignals of the endpoint's own RateLimit.
	Signals Signals
}

// Endpoints is an [http.RoundTripper] for a [Transport]'s Base, and the
// Transport's Signals, over the endpoints of a route.Router: each attempt
// goes to the endpoint its context names ([route.EndpointOf]), with the
// endpoint's URL and headers, over its own Base; each response goes to
// the endpoint's own Signals. The caller's request is not modified. Build
// one with [NewEndpoints]. It is safe for concurrent use.
type Endpoints struct {
	eps []endpoint
}

type endpoint struct {
	Endpoint
	u *url.URL
}

var (
	errNoEndpoint = errors.New("httppolicy: the request's context names no endpoint of these Endpoints: use them below a pipeline whose Route they were built for")
	errNilURL     = errors.New("httppolicy: nil Request.URL")
	errRedirect   = errors.New("httppolicy: Endpoints do not follow redirects: have the http.Client's CheckRedirect return http.ErrUseLastResponse")
)

// NewEndpoints returns the Endpoints of r: eps holds one Endpoint for each
// of r's endpoints, by name. It fails, naming the field, on a name that r
// does not have or has twice, and on an invalid BaseURL.
func NewEndpoints(r *route.Router, eps []Endpoint) (*Endpoints, error) {
	names := r.Endpoints()
	out := &Endpoints{eps: make([]endpoint, len(names))}
	byName := make(map[string]int, len(names))
	for i, e := range names {
		byName[e.Name] = i
	}
	for k, e := range eps {
		i, ok := byName[e.Name]
		switch {
		case !ok:
			return nil, fmt.Errorf("httppolicy: Endpoints[%d].Name %q is no endpoint of route %q", k, e.Name, r.Name())
		case out.eps[i].u != nil:
			return nil, fmt.Errorf("httppolicy: Endpoints[%d].Name %q is given twice", k, e.Name)
		}
		u, err := baseURL(e.BaseURL)
		if err != nil {
			return nil, fmt.Errorf("httppolicy: Endpoints[%d].BaseURL (%s): %w", k, e.Name, err)
		}
		out.eps[i] = endpoint{Endpoint: e, u: u}
	}
	for i, e := range out.eps {
		if e.u == nil {
			return nil, fmt.Errorf("httppolicy: no Endpoint for route %q's endpoint %q", r.Name(), names[i].Name)
		}
	}
	return out, nil
}

// baseURL parses and checks a BaseURL. Its errors quote no part of it
// that may hold a secret.
func baseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("scheme must be http or https")
	case u.Host == "":
		return nil, errors.New("no host")
	case u.User != nil:
		return nil, errors.New("user info is not allowed: put credentials in Header")
	case u.RawQuery != "" || u.ForceQuery:
		return nil, errors.New("a query is not allowed")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return nil, errors.New("a fragment is not allowed")
	}
	// The prefix is kept escaped, as given: a %2F in it stays one.
	u.RawPath = strings.TrimSuffix(u.EscapedPath(), "/")
	return u, nil
}

// RoundTrip sends a copy of req to the endpoint of its context. The
// response's Request is that copy, with req's headers in place of the
// endpoint's. It refuses a redirect's request (req.Response set): its URL
// is the caller's view, resolved against no endpoint; an
// [http.Client] over Endpoints should return [http.ErrUseLastResponse]
// from its CheckRedirect, as NewHTTPClient's does.
func (e *Endpoints) RoundTrip(req *http.Request) (*http.Response, error) {
	ep, ok := route.EndpointOf(req.Context())
	switch {
	case req.URL == nil:
		closeReqBody(req)
		return nil, errNilURL
	case !ok || ep.Index >= len(e.eps) || e.eps[ep.Index].Name != ep.Name:
		closeReqBody(req)
		return nil, errNoEndpoint
	case req.Response != nil:
		closeReqBody(req)
		return nil, errRedirect
	}
	d := &e.eps[ep.Index]
	r := req.Clone(req.Context())
	r.URL.Scheme, r.URL.Host, r.Host = d.u.Scheme, d.u.Host, ""
	raw := d.u.RawPath
	if p := req.URL.EscapedPath(); p != "" {
		raw += "/" + strings.TrimPrefix(p, "/")
	}
	r.URL.RawPath = cmp.Or(raw, "/")
	r.URL.Path, _ = url.PathUnescape(r.URL.RawPath) // both from valid escapes
	for k, v := range d.Header {
		for have := range r.Header {
			if strings.EqualFold(have, k) { // a key set directly, not canonical
				delete(r.Header, have)
			}
		}
		r.Header[http.CanonicalHeaderKey(k)] = slices.Clone(v)
	}
	resp, err := cmp.Or(d.Base, http.DefaultTransport).RoundTrip(r)
	if resp != nil && resp.Request == r {
		// The endpoint's URL, not its secrets, for the caller to see.
		shown := *r
		shown.Header = req.Header
		resp.Request = &shown
	}
	return resp, err
}

// Observe passes resp to the Signals of the endpoint that sent it.
func (e *Endpoints) Observe(resp *http.Response) {
	if resp == nil || resp.Request == nil {
		return
	}
	if ep, ok := route.EndpointOf(resp.Request.Context()); ok && ep.Index < len(e.eps) && e.eps[ep.Index].Signals != nil {
		e.eps[ep.Index].Signals.Observe(resp)
	}
}

// CloseIdleConnections closes the idle connections of every endpoint's
// Base that can.
func (e *Endpoints) CloseIdleConnections() {
	for i := range e.eps {
		closeIdle(e.eps[i].Base)
	}
}

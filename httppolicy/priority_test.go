package httppolicy_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
)

// seen records the priority each policy run and handler saw.
type seen struct {
	mu              sync.Mutex
	policy, handler []policy.Priority
}

func (s *seen) Execute(ctx context.Context, fn policy.Func) error {
	s.mu.Lock()
	s.policy = append(s.policy, policy.PriorityOf(ctx))
	s.mu.Unlock()
	return fn(ctx)
}

func (s *seen) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.handler = append(s.handler, policy.PriorityOf(r.Context()))
	s.mu.Unlock()
}

func (s *seen) check(t *testing.T, want policy.Priority) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, got := range [][]policy.Priority{s.policy, s.handler} {
		if len(got) != 1 || got[0] != want {
			t.Fatalf("policy saw %v, handler saw %v; want [%v] each", s.policy, s.handler, want)
		}
	}
}

// servePriority serves one request with header value v (none if empty)
// through a Handler configured by cfg.
func servePriority(t *testing.T, cfg httppolicy.HandlerConfig, v string) *seen {
	s := &seen{}
	r := httptest.NewRequest(http.MethodGet, "/login", nil)
	if v != "" {
		r.Header.Set(httppolicy.PriorityHeader, v)
	}
	httppolicy.Handler(s, s, cfg).ServeHTTP(httptest.NewRecorder(), r)
	return s
}

var trustAll = func(*http.Request) bool { return true }

func byRoute(r *http.Request) policy.Priority {
	if r.URL.Path == "/login" {
		return policy.PriorityCritical
	}
	return policy.PrioritySheddable
}

func TestHandlerPriorityFromItsFunction(t *testing.T) {
	servePriority(t, httppolicy.HandlerConfig{Priority: byRoute}, "").check(t, policy.PriorityCritical)
}

func TestHandlerIgnoresPriorityOfUntrustedClient(t *testing.T) {
	servePriority(t, httppolicy.HandlerConfig{}, "critical").check(t, policy.PriorityDefault)
	untrusted := httppolicy.HandlerConfig{
		Priority:      func(*http.Request) policy.Priority { return policy.PrioritySheddable },
		TrustPriority: func(*http.Request) bool { return false },
	}
	servePriority(t, untrusted, "critical").check(t, policy.PrioritySheddable)
}

func TestHandlerUsesPriorityOfTrustedClient(t *testing.T) {
	servePriority(t, httppolicy.HandlerConfig{Priority: byRoute, TrustPriority: trustAll}, "sheddable").check(t, policy.PrioritySheddable)
}

func TestHandlerIgnoresUnknownPriorityOfTrustedClient(t *testing.T) {
	servePriority(t, httppolicy.HandlerConfig{TrustPriority: trustAll}, "urgent").check(t, policy.PriorityDefault)
	servePriority(t, httppolicy.HandlerConfig{Priority: byRoute, TrustPriority: trustAll}, "urgent").check(t, policy.PriorityCritical)
}

func TestHandlerTreatsUnknownPriorityOfItsFunctionAsDefault(t *testing.T) {
	cfg := httppolicy.HandlerConfig{Priority: func(*http.Request) policy.Priority { return -5 }}
	servePriority(t, cfg, "").check(t, policy.PriorityDefault)
}

// A Transport that propagates the priority reaches a Handler that trusts
// it, over a real connection; the caller's request is left as it was.
func TestTransportPropagatesPriorityToTrustingHandler(t *testing.T) {
	for _, propagate := range []bool{true, false} {
		s := &seen{}
		srv := httptest.NewServer(httppolicy.Handler(s, s, httppolicy.HandlerConfig{TrustPriority: trustAll}))
		c := &http.Client{Transport: &httppolicy.Transport{Base: srv.Client().Transport, Policy: direct{}, PropagatePriority: propagate}}
		ctx := policy.WithPriority(context.Background(), policy.PrioritySheddable)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if len(req.Header) != 0 {
			t.Errorf("the caller's request header became %v", req.Header)
		}
		want := policy.PriorityDefault
		if propagate {
			want = policy.PrioritySheddable
		}
		s.check(t, want)
		srv.Close()
	}
}

type direct struct{}

func (direct) Execute(ctx context.Context, fn policy.Func) error { return fn(ctx) }

// A proxy that trusts no client and copies the inbound headers, as a
// reverse proxy does, forwards no forged priority to a backend that trusts
// the proxy: a request of the default priority sends none.
func TestForgedPriorityDoesNotCrossAnUntrustingHop(t *testing.T) {
	s := &seen{}
	backend := httptest.NewServer(httppolicy.Handler(s, s, httppolicy.HandlerConfig{TrustPriority: trustAll}))
	defer backend.Close()
	tr := &httppolicy.Transport{Base: backend.Client().Transport, Policy: direct{}, PropagatePriority: true}
	proxy := httptest.NewServer(httppolicy.Handler(direct{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, _ := http.NewRequestWithContext(r.Context(), r.Method, backend.URL+r.URL.Path, nil)
		out.Header = r.Header.Clone()
		resp, err := tr.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}), httppolicy.HandlerConfig{}))
	defer proxy.Close()
	req, _ := http.NewRequest(http.MethodGet, proxy.URL+"/", nil)
	req.Header.Set(httppolicy.PriorityHeader, "critical")
	resp, err := proxy.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	s.check(t, policy.PriorityDefault)
}

// The header name matches as HTTP matches it, whatever its spelling in the
// request's header map: a propagated priority replaces any the request
// holds under any spelling, a default one removes every spelling, and a
// Handler reads a priority under any spelling.
func TestPriorityHeaderMatchesAnySpelling(t *testing.T) {
	for _, key := range []string{"Watertight-Priority", "watertight-priority", "WATERTIGHT-PRIORITY", "wAtErTiGhT-pRiOrItY"} {
		for _, p := range []policy.Priority{policy.PriorityDefault, policy.PrioritySheddable, policy.PriorityCritical} {
			var got []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r.Header.Values(httppolicy.PriorityHeader)
			}))
			c := &http.Client{Transport: &httppolicy.Transport{Base: srv.Client().Transport, Policy: direct{}, PropagatePriority: true}}
			req, _ := http.NewRequestWithContext(policy.WithPriority(context.Background(), p), http.MethodGet, srv.URL, nil)
			req.Header = http.Header{key: {"critical"}}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			srv.Close()
			want := []string{p.String()}
			if p == policy.PriorityDefault {
				want = nil
			}
			if len(got) != len(want) || len(want) == 1 && got[0] != want[0] {
				t.Errorf("%s: critical, sent on a %v context: the next hop got %q; want %q", key, p, got, want)
			}
			if v := req.Header[key]; len(v) != 1 || v[0] != "critical" {
				t.Errorf("%s: the caller's request header became %v", key, req.Header)
			}
		}
		s := &seen{}
		r := httptest.NewRequest(http.MethodGet, "/chat", nil)
		r.Header = http.Header{key: {"critical"}}
		httppolicy.Handler(s, s, httppolicy.HandlerConfig{TrustPriority: trustAll}).ServeHTTP(httptest.NewRecorder(), r)
		s.check(t, policy.PriorityCritical)
	}
}

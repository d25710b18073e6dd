package httppolicy_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/keyed"
	"github.com/watertight/watertight/policy"
)

// TestHandlerKey: HandlerConfig.Key keys each request, so that a
// keyed.Group gives each tenant its own bulkhead: a tenant whose bulkhead
// is full gets 503s while another is served.
func TestHandlerKey(t *testing.T) {
	g, err := keyed.NewGroup(keyed.Config{MaxKeys: 10, New: func(string, string) (policy.Policy, error) {
		return bulkhead.New(bulkhead.Config{Limit: 1})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	release, in := make(chan struct{}), make(chan struct{}, 1)
	var seen []string
	h := httppolicy.Handler(g, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, policy.KeyOf(r.Context()))
		if r.URL.Query().Get("hold") != "" {
			in <- struct{}{}
			<-release
		}
	}), httppolicy.HandlerConfig{Key: func(r *http.Request) string { return r.Header.Get("X-Tenant") }})
	get := func(tenant, query string) int {
		req := httptest.NewRequest("GET", "/?"+query, nil)
		if tenant != "" {
			req.Header.Set("X-Tenant", tenant)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	done := make(chan int)
	go func() { done <- get("a", "hold=1") }()
	<-in
	if code := get("a", ""); code != http.StatusServiceUnavailable {
		t.Errorf("tenant a while its bulkhead is full: %d, want 503", code)
	}
	if code := get("b", ""); code != http.StatusOK {
		t.Errorf("tenant b while a's bulkhead is full: %d, want 200", code)
	}
	close(release)
	<-done
	// No key from Key: the request keeps its context's, here none.
	if code := get("", ""); code != http.StatusServiceUnavailable {
		t.Errorf("a request with no key: %d, want 503 (no_key)", code)
	}
	req := httptest.NewRequest("GET", "/", nil).WithContext(policy.WithKey(context.Background(), "c"))
	h.ServeHTTP(httptest.NewRecorder(), req)
	if want := []string{"a", "b", "c"}; len(seen) != 3 || seen[0] != want[0] || seen[1] != want[1] || seen[2] != want[2] {
		t.Errorf("the handler saw keys %q, want %q", seen, want)
	}
}

// keyRecorder is a policy that records the key of each call.
type keyRecorder struct{ keys []string }

func (k *keyRecorder) Execute(ctx context.Context, fn policy.Func) error {
	k.keys = append(k.keys, policy.KeyOf(ctx))
	return fn(ctx)
}

// TestTransportKey: Transport.Key keys each request for the policies; an
// empty key leaves the request's context's.
func TestTransportKey(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	rec := &keyRecorder{}
	host := true
	tr := &httppolicy.Transport{Policy: rec, Key: func(r *http.Request) string {
		if host {
			return httppolicy.KeyByHost(r)
		}
		return ""
	}}
	c := &http.Client{Transport: tr}
	for _, h := range []bool{true, false} {
		host = h
		req, _ := http.NewRequestWithContext(policy.WithKey(context.Background(), "ctx"), "GET", srv.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if want := strings.TrimPrefix(srv.URL, "http://"); len(rec.keys) != 2 || rec.keys[0] != want || rec.keys[1] != "ctx" {
		t.Errorf("keys %q, want %q then the context's", rec.keys, want)
	}
}

// TestKeyByHostCase: host names are case-insensitive, so one host is one
// key however its URL spells it.
func TestKeyByHostCase(t *testing.T) {
	a := httptest.NewRequest("GET", "http://API.Example.com:8080/v1", nil)
	b := httptest.NewRequest("GET", "http://api.example.com:8080/v2", nil)
	if ka, kb := httppolicy.KeyByHost(a), httppolicy.KeyByHost(b); ka != kb || ka != "api.example.com:8080" {
		t.Errorf("KeyByHost = %q and %q, want api.example.com:8080 for both", ka, kb)
	}
}

package watertight_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/hedge"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

// keysSeen is a policy that records the key of each call it runs.
type keysSeen struct {
	mu   sync.Mutex
	keys []string
}

func (k *keysSeen) Execute(ctx context.Context, fn policy.Func) error {
	k.mu.Lock()
	k.keys = append(k.keys, policy.KeyOf(ctx))
	k.mu.Unlock()
	return fn(ctx)
}

func (k *keysSeen) all() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.keys...)
}

// TestHTTPClientKeyEveryAttempt: HTTPOptions.Key keys every attempt of a
// request: each retry, and each hedge, carries the key Key gave.
func TestHTTPClientKeyEveryAttempt(t *testing.T) {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	for _, hedged := range []bool{false, true} {
		mu.Lock()
		n = 0
		mu.Unlock()
		rec := &keysSeen{}
		h := watertight.HTTPOptions{Key: httppolicy.KeyByHost}
		if hedged {
			hd, err := hedge.New(hedge.Config{Delay: time.Nanosecond, MaxHedges: 1})
			if err != nil {
				t.Fatal(err)
			}
			h.Hedge = hd
		}
		c, err := watertight.NewHTTPClient("api", watertight.Config{
			Retry: &retry.Config{MaxAttempts: 3, InitialInterval: time.Millisecond},
			Use:   compose.Policies{Breaker: rec},
		}, h)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Get(strings.Replace(srv.URL, "127.0.0.1", "LocalHost", 1))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		c.Close()
		keys := rec.all()
		want := "localhost" + strings.TrimPrefix(srv.URL, "http://127.0.0.1")
		if len(keys) < 2 {
			t.Errorf("hedged %v: %d attempts, want a retry", hedged, len(keys))
		}
		for _, k := range keys {
			if k != want {
				t.Errorf("hedged %v: an attempt saw key %q, want %q", hedged, k, want)
			}
		}
	}
}

// TestHTTPClientKeyByHostEndpoints: Key reads the request as the caller
// made it, before an endpoint is picked: with HTTPOptions.Endpoints,
// KeyByHost gives the caller's host whichever endpoint answers.
func TestHTTPClientKeyByHostEndpoints(t *testing.T) {
	var eu, us seen
	euSrv := endpointServer(t, &eu, answerOK)
	usSrv := endpointServer(t, &us, answerOK)
	rec := &keysSeen{}
	c, err := watertight.NewHTTPClient("chat", watertight.Config{Use: compose.Policies{Bulkhead: rec}},
		watertight.HTTPOptions{Key: httppolicy.KeyByHost, Endpoints: []watertight.HTTPEndpoint{
			{Endpoint: route.Endpoint{Name: "eu"}, BaseURL: euSrv.URL},
			{Endpoint: route.Endpoint{Name: "us"}, BaseURL: usSrv.URL},
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 4 {
		resp, err := c.Get("http://API.invalid/v1/chat")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Request.URL.Host == "api.invalid" {
			t.Errorf("the request was sent to the caller's host, not an endpoint's")
		}
	}
	keys := rec.all()
	if len(keys) != 4 {
		t.Fatalf("the pipeline saw %d calls, want 4", len(keys))
	}
	for _, k := range keys {
		if k != "api.invalid" {
			t.Errorf("the pipeline saw key %q, want the caller's host, api.invalid", k)
		}
	}
}

package watertight_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/keyed"
	"github.com/watertight/watertight/policy"
)

// A breaker per host in one client, the rest of the pipeline shared: a
// failing host opens its own breaker, and the other host's requests go on.
func ExampleNewHTTPClient_breakerPerHost() {
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer down.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()

	hosts, err := keyed.NewGroup(keyed.Config{Name: "hosts", MaxKeys: 100, MinIdle: time.Minute,
		New: func(host, label string) (policy.Policy, error) {
			// Named by label, not host: telemetry stays bounded.
			return breaker.New(breaker.Config{Name: "api:" + label, ConsecutiveFailures: 2, OpenTimeout: time.Minute})
		}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer hosts.Close()
	c, err := watertight.NewHTTPClient("api", watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 8},
		Use:      compose.Policies{Breaker: hosts},
	}, watertight.HTTPOptions{Key: httppolicy.KeyByHost})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	get := func(url string) string {
		resp, err := c.Get(url)
		if errors.Is(err, breaker.ErrOpen) {
			return "breaker open"
		}
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		return resp.Status
	}
	for range 3 {
		fmt.Println("down:", get(down.URL))
	}
	fmt.Println("up:", get(up.URL))
	// Output:
	// down: 500 Internal Server Error
	// down: 500 Internal Server Error
	// down: breaker open
	// up: 200 OK
}

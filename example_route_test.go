package watertight_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

// An HTTP client over two deployments of one API, each with its own key
// and its own breaker. The first fails every request; each request is
// retried on the other, and once eu's breaker opens, requests go straight
// to us.
func ExampleNewHTTPClient_endpoints() {
	eu := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer eu.Close()
	us := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s with key %s", r.URL.Path, r.Header.Get("Api-Key"))
	}))
	defer us.Close()

	c, err := watertight.NewHTTPClient("chat", watertight.Config{
		Retry:   &retry.Config{MaxAttempts: 2, InitialInterval: time.Millisecond},
		Breaker: &breaker.Config{ConsecutiveFailures: 1},
	}, watertight.HTTPOptions{Endpoints: []watertight.HTTPEndpoint{
		{Endpoint: route.Endpoint{Name: "eu"}, BaseURL: eu.URL + "/openai", Header: http.Header{"Api-Key": {"eu-key"}}},
		{Endpoint: route.Endpoint{Name: "us"}, BaseURL: us.URL + "/openai", Header: http.Header{"Api-Key": {"us-key"}}},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	for range 3 {
		resp, err := c.Get("http://api.invalid/v1/models")
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	// Output:
	// 200 /openai/v1/models with key us-key
	// 200 /openai/v1/models with key us-key
	// 200 /openai/v1/models with key us-key
}

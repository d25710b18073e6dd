package httppolicy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/route"
)

func router(t *testing.T, names ...string) *route.Router {
	t.Helper()
	var eps []route.Endpoint
	for _, n := range names {
		eps = append(eps, route.Endpoint{Name: n})
	}
	r, err := route.New(route.Config{Name: "r", Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestEndpointsRefuseOtherRoutes checks that Endpoints built for one
// router send nothing under another's pipeline, or outside any.
func TestEndpointsRefuseOtherRoutes(t *testing.T) {
	sent := 0
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent++
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	})
	eps0Router := router(t, "eu", "us")
	eps, err := httppolicy.NewEndpoints(eps0Router, []httppolicy.Endpoint{
		{Name: "eu", BaseURL: "http://eu.invalid", Base: base}, {Name: "us", BaseURL: "http://us.invalid", Base: base}})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := compose.New("other", compose.Policies{Route: router(t, "x", "y")})
	err = other.Execute(context.Background(), func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.invalid/", nil)
		_, err := eps.RoundTrip(req)
		return err
	})
	req, _ := http.NewRequest(http.MethodGet, "http://api.invalid/", nil)
	_, err2 := eps.RoundTrip(req)
	routed, _ := compose.New("routed", compose.Policies{Route: eps0Router})
	var err3 error
	routed.Execute(context.Background(), func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.invalid/", nil)
		req.URL = nil
		_, err3 = eps.RoundTrip(req) // no panic
		return nil
	})
	if err3 == nil {
		t.Errorf("a request without a URL: no error")
	}
	if err == nil || err2 == nil || sent != 0 {
		t.Errorf("under another route: %v; outside any: %v; %d sent; want errors and nothing sent", err, err2, sent)
	}
}

// TestEndpointsRefuseRedirects checks that a client that follows
// redirects over Endpoints gets an error, not a request to a misjoined
// URL, and that the key goes nowhere else.
func TestEndpointsRefuseRedirects(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		http.Redirect(w, r, "/v1/new", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	r := router(t, "eu")
	eps, err := httppolicy.NewEndpoints(r, []httppolicy.Endpoint{{Name: "eu", BaseURL: srv.URL + "/v1", Header: http.Header{"Api-Key": {"sk-1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := compose.New("p", compose.Policies{Route: r})
	c := &http.Client{Transport: &httppolicy.Transport{Base: eps, Policy: p}}
	resp, err := c.Get("http://api.invalid/old")
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "CheckRedirect") || len(paths) != 1 || errors.Is(err, context.Canceled) {
		t.Errorf("following a redirect: %v, paths %v; want an error saying to stop following, one request", err, paths)
	}
}

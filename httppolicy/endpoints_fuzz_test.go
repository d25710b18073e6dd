package httppolicy_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/route"
)

// FuzzEndpointURL sends a request of any path and query to an endpoint of
// any BaseURL: NewEndpoints refuses the BaseURL, or the request sent goes
// to the BaseURL's scheme and host, under its path, with the request's
// query and no user info; the caller's request is left as it was.
func FuzzEndpointURL(f *testing.F) {
	f.Add("https://eu.example.com/openai/deployments/x/", "/chat/completions", "stream=1")
	f.Add("http://h:8080", "", "")
	f.Add("https://h/v1", "/a%2Fb//c", "x=%20")
	f.Add("https://u:p@h/", "/x", "")
	f.Add("https://h/p?q=1", "/x", "")
	f.Add("https://h/#f", "/x", "")
	f.Fuzz(func(t *testing.T, base, path, query string) {
		r, err := route.New(route.Config{Name: "r", Endpoints: []route.Endpoint{{Name: "a"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var sent *http.Request
		eps, err := httppolicy.NewEndpoints(r, []httppolicy.Endpoint{{Name: "a", BaseURL: base,
			Header: http.Header{"Api-Key": {"k"}},
			Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
				sent = req
				return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
			})}})
		if err != nil {
			// One of a fixed set: no part of the BaseURL, which may hold a
			// secret.
			msg, _ := strings.CutPrefix(err.Error(), "httppolicy: Endpoints[0].BaseURL (a): ")
			switch msg {
			case "not a URL", "scheme must be http or https", "no host", "a query is not allowed",
				"a fragment is not allowed", "user info is not allowed: put credentials in Header":
			default:
				t.Fatalf("error %q", err)
			}
			return
		}
		bu, perr := url.Parse(base)
		if perr != nil || bu.User != nil || bu.RawQuery != "" || bu.Fragment != "" {
			t.Fatalf("NewEndpoints took %q", base)
		}
		req, err := http.NewRequest(http.MethodGet, "http://caller.invalid/", nil)
		if err != nil {
			t.Skip()
		}
		req.URL.Path, req.URL.RawQuery = path, query
		before := req.URL.String()
		p, _ := compose.New("p", compose.Policies{Route: r})
		p.Execute(context.Background(), func(ctx context.Context) error {
			_, err := eps.RoundTrip(req.WithContext(ctx))
			return err
		})
		if req.URL.String() != before || req.Header.Get("Api-Key") != "" {
			t.Fatalf("the caller's request changed: %s, %v", req.URL, req.Header)
		}
		if sent == nil {
			t.Fatal("nothing sent")
		}
		u := sent.URL
		want := strings.TrimSuffix(bu.EscapedPath(), "/")
		if p := req.URL.EscapedPath(); p != "" {
			want += "/" + strings.TrimPrefix(p, "/")
		}
		if want == "" {
			want = "/"
		}
		if u.Scheme != bu.Scheme || u.Host != bu.Host || u.User != nil || u.RawQuery != query ||
			u.EscapedPath() != want || sent.Header.Get("Api-Key") != "k" {
			t.Fatalf("base %q, path %q, query %q: sent %s (escaped path %q, want %q)", base, path, query, u, u.EscapedPath(), want)
		}
	})
}

package watertight_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

// seen is what an endpoint's server received.
type seen struct {
	mu    sync.Mutex
	paths []string
	auth  []string
}

func (s *seen) add(r *http.Request) {
	s.mu.Lock()
	s.paths = append(s.paths, r.URL.RequestURI())
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	s.mu.Unlock()
}

func (s *seen) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.paths)
}

func endpointServer(t *testing.T, s *seen, h http.HandlerFunc) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.add(r)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func answerOK(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }

// TestHTTPClientRoutes checks that each request goes to one endpoint, with
// the endpoint's path prefix and headers, that the caller's request is not
// modified, and that a failing endpoint's requests are retried on the
// other.
func TestHTTPClientRoutes(t *testing.T) {
	var eu, us seen
	euSrv := endpointServer(t, &eu, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	usSrv := endpointServer(t, &us, answerOK)
	c, err := watertight.NewHTTPClient("chat", watertight.Config{
		Retry: &retry.Config{MaxAttempts: 2, InitialInterval: time.Millisecond},
	}, watertight.HTTPOptions{Endpoints: []watertight.HTTPEndpoint{
		{Endpoint: route.Endpoint{Name: "eu"}, BaseURL: euSrv.URL + "/openai/deployments/x/", Header: http.Header{"Authorization": {"Bearer eu-key"}}},
		{Endpoint: route.Endpoint{Name: "us"}, BaseURL: usSrv.URL + "/v1", Header: http.Header{"authorization": {"Bearer us-key"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 20 {
		req, _ := http.NewRequest(http.MethodGet, "http://api.invalid/chat/completions?stream=1", nil)
		req.Header.Set("Authorization", "Bearer caller")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("answer %d %q; want us's ok", resp.StatusCode, body)
		}
		if req.URL.String() != "http://api.invalid/chat/completions?stream=1" || req.Header.Get("Authorization") != "Bearer caller" || req.Host != "api.invalid" {
			t.Fatalf("the caller's request was modified: %v %v", req.URL, req.Header)
		}
	}
	for name, s := range map[string]*seen{"eu": &eu, "us": &us} {
		s.mu.Lock()
		for i, p := range s.paths {
			want := map[string]string{"eu": "/openai/deployments/x/chat/completions?stream=1", "us": "/v1/chat/completions?stream=1"}[name]
			if p != want || s.auth[i] != "Bearer "+name+"-key" {
				t.Errorf("%s got %s with %q; want %s with its own key", name, p, s.auth[i], want)
			}
		}
		s.mu.Unlock()
	}
	if eu.n() == 0 || us.n() != 20 {
		t.Errorf("eu got %d requests, us %d; want eu tried and us to answer all 20", eu.n(), us.n())
	}
}

// TestHTTPClientEndpointHold checks that a 429 from one endpoint holds only
// that endpoint's RateLimit, and the requests go to the other without
// waiting.
func TestHTTPClientEndpointHold(t *testing.T) {
	var eu, us seen
	euSrv := endpointServer(t, &eu, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	usSrv := endpointServer(t, &us, answerOK)
	c, err := watertight.NewHTTPClient("chat", watertight.Config{
		Retry:     &retry.Config{MaxAttempts: 2, InitialInterval: time.Millisecond},
		RateLimit: &ratelimit.Config{MaxWait: time.Minute, MaxHold: time.Minute},
	}, watertight.HTTPOptions{Endpoints: []watertight.HTTPEndpoint{
		{Endpoint: route.Endpoint{Name: "eu"}, BaseURL: euSrv.URL},
		{Endpoint: route.Endpoint{Name: "us"}, BaseURL: usSrv.URL},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	for range 20 {
		resp, err := c.Get("http://api.invalid/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d; want 200 from us", resp.StatusCode)
		}
	}
	if eu.n() != 1 {
		t.Errorf("eu got %d requests; want 1, then its hold sends the rest to us", eu.n())
	}
	eps := c.Pipeline.Router().Endpoints()
	if h := eps[0].RateLimit.(*ratelimit.Limiter).Held(); h < 25*time.Second {
		t.Errorf("eu's hold is %v; want about 30s", h)
	}
	if h := eps[1].RateLimit.(*ratelimit.Limiter).Held(); h != 0 {
		t.Errorf("us's hold is %v; want none", h)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the requests took %v; none should wait for eu's hold", d)
	}
}

// TestHTTPClientEndpointSecrets checks that an endpoint's headers appear in
// no error, span or metric, whatever the endpoint does.
func TestHTTPClientEndpointSecrets(t *testing.T) {
	const secret = "sk-secret-0123456789"
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // connection refused
	var s seen
	failing := endpointServer(t, &s, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, "bad key %s", r.Header.Get("Api-Key")) // a provider that echoes it
	})
	hanging := endpointServer(t, &s, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	hdr := http.Header{"Api-Key": {secret}, "Authorization": {"Bearer " + secret}}
	c, err := watertight.NewHTTPClient("chat", watertight.Config{
		Retry:   &retry.Config{MaxAttempts: 3, InitialInterval: time.Millisecond},
		Breaker: &breaker.Config{ConsecutiveFailures: 2},
		Attempt: &deadline.Config{Timeout: 50 * time.Millisecond},
	}, watertight.HTTPOptions{Endpoints: []watertight.HTTPEndpoint{
		{Endpoint: route.Endpoint{Name: "refused"}, BaseURL: closed.URL, Header: hdr},
		{Endpoint: route.Endpoint{Name: "failing"}, BaseURL: failing.URL, Header: hdr},
		{Endpoint: route.Endpoint{Name: "hanging"}, BaseURL: hanging.URL, Header: hdr},
	}}, compose.WithTracerProvider(tp), compose.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var errs []string
	for range 30 {
		resp, err := c.Get("http://api.invalid/x")
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if len(errs) == 0 {
		t.Fatal("no request failed")
	}
	for _, e := range errs {
		if strings.Contains(e, secret) {
			t.Fatalf("an error holds the secret: %s", e)
		}
	}
	for _, sp := range spans.Ended() {
		for _, kv := range sp.Attributes() {
			if strings.Contains(kv.Value.Emit(), secret) {
				t.Errorf("span %s attribute %s holds the secret", sp.Name(), kv.Key)
			}
		}
		for _, ev := range sp.Events() {
			for _, kv := range ev.Attributes {
				if strings.Contains(kv.Value.Emit(), secret) {
					t.Errorf("span %s event %s holds the secret", sp.Name(), ev.Name)
				}
			}
		}
		if strings.Contains(sp.Status().Description, secret) {
			t.Errorf("span %s status holds the secret", sp.Name())
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%+v", rm); strings.Contains(got, secret) {
		t.Error("a metric holds the secret")
	}
}

func TestHTTPClientEndpointErrors(t *testing.T) {
	ep := func(base string) []watertight.HTTPEndpoint {
		return []watertight.HTTPEndpoint{{Endpoint: route.Endpoint{Name: "a"}, BaseURL: base}}
	}
	for _, tc := range []struct {
		cfg  watertight.Config
		eps  []watertight.HTTPEndpoint
		want string
	}{
		{watertight.Config{}, ep("https://host/x?key=sk-1"), "Endpoints[0].BaseURL (a): a query is not allowed"},
		{watertight.Config{}, ep("https://host/x#frag"), "a fragment is not allowed"},
		{watertight.Config{}, ep("https://user:sk-1@host/x"), "user info is not allowed"},
		{watertight.Config{}, ep("host/x"), "scheme must be http or https"},
		{watertight.Config{}, ep("https:///x"), "no host"},
		{watertight.Config{}, []watertight.HTTPEndpoint{{BaseURL: "https://host"}}, "Name must not be empty"},
		{watertight.Config{Route: &route.Config{Endpoints: []route.Endpoint{{Name: "a"}}}}, ep("https://host"), "both set"},
		{watertight.Config{Route: &route.Config{Endpoints: []route.Endpoint{{Name: "a"}}}}, nil, "a Route needs HTTPOptions.Endpoints"},
	} {
		c, err := watertight.NewHTTPClient("chat", tc.cfg, watertight.HTTPOptions{Endpoints: tc.eps})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "sk-1") {
			t.Errorf("NewHTTPClient(%v) = %v, %v; want an error with %q, without the secret", tc.eps, c, err, tc.want)
		}
	}
}

// TestHTTPClientSpentQuotaMovesOn checks that a request whose endpoint
// answers that its quota is spent goes on to another endpoint at once, and
// that the caller gets the 429 when every quota is spent.
func TestHTTPClientSpentQuotaMovesOn(t *testing.T) {
	spent := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}`)
	}
	var eu, us seen
	euSrv := endpointServer(t, &eu, spent)
	usSrv := endpointServer(t, &us, answerOK)
	// No probe within the test, however slow the machine.
	c, err := watertight.NewHTTPClient("chat", watertight.Config{Route: &route.Config{ProbeInterval: time.Hour}},
		watertight.HTTPOptions{Endpoints: []watertight.HTTPEndpoint{
			{Endpoint: route.Endpoint{Name: "eu"}, BaseURL: euSrv.URL},
			{Endpoint: route.Endpoint{Name: "us"}, BaseURL: usSrv.URL},
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 10 {
		resp, err := c.Post("http://api.invalid/x", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d; want us's 200", resp.StatusCode)
		}
	}
	if eu.n() != 1 || us.n() != 10 {
		t.Errorf("eu got %d requests, us %d; want 1 and 10", eu.n(), us.n())
	}

	var other seen
	otherSrv := endpointServer(t, &other, spent)
	c2, err := watertight.NewHTTPClient("chat2", watertight.Config{}, watertight.HTTPOptions{Endpoints: []watertight.HTTPEndpoint{
		{Endpoint: route.Endpoint{Name: "eu"}, BaseURL: euSrv.URL},
		{Endpoint: route.Endpoint{Name: "other"}, BaseURL: otherSrv.URL},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	resp, err := c2.Post("http://api.invalid/x", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Should-Retry") != "false" || !strings.Contains(string(body), "insufficient_quota") {
		t.Errorf("every quota spent: %d %q %s; want the 429, not to be retried", resp.StatusCode, resp.Header.Get("X-Should-Retry"), body)
	}
	if other.n() != 1 || eu.n() != 2 {
		t.Errorf("with every quota spent, eu got %d requests in all, other %d; want one each", eu.n(), other.n())
	}
}

// TestHTTPClientEndpointURLs checks how a request's URL joins an
// endpoint's, escapes kept; that a redirect comes back to the caller; and
// that the response's Request shows the endpoint's URL without its key.
func TestHTTPClientEndpointURLs(t *testing.T) {
	var s seen
	srv := endpointServer(t, &s, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/old" {
			http.Redirect(w, r, "/v1/new", http.StatusTemporaryRedirect)
			return
		}
		io.WriteString(w, r.URL.EscapedPath())
	})
	c, err := watertight.NewHTTPClient("chat", watertight.Config{}, watertight.HTTPOptions{Endpoints: []watertight.HTTPEndpoint{
		{Endpoint: route.Endpoint{Name: "eu"}, BaseURL: srv.URL + "/v1/", Header: http.Header{"Api-Key": {"sk-eu"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for path, want := range map[string]string{
		"/files/a%2Fb": "/v1/files/a%2Fb",
		"/x":           "/v1/x",
		"/":            "/v1/",
		"":             "/v1",
	} {
		resp, err := c.Get("http://api.invalid" + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != want {
			t.Errorf("request path %q reached the endpoint as %q; want %q", path, body, want)
		}
		if resp.Request.URL.Host != strings.TrimPrefix(srv.URL, "http://") || resp.Request.Header.Get("Api-Key") != "" {
			t.Errorf("response's Request: %s, %v; want the endpoint's URL, without its key", resp.Request.URL, resp.Request.Header)
		}
	}
	resp, err := c.Get("http://api.invalid/old")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "/v1/new" {
		t.Errorf("redirect: %d to %q; want the 307 itself, to /v1/new", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestHTTPClientEndpointStreams checks that a routed stream keeps the
// client's first-byte timeout: an endpoint that sends its headers and no
// event fails the attempt, which goes on to the other endpoint, and the
// stream handed over holds its endpoint's call until its body ends.
func TestHTTPClientEndpointStreams(t *testing.T) {
	var mute, live seen
	muteSrv := endpointServer(t, &mute, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	next := make(chan struct{})
	liveSrv := endpointServer(t, &live, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-next:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	c, err := watertight.NewHTTPClient("chat", watertight.Config{
		Retry: &retry.Config{MaxAttempts: 2, InitialInterval: time.Millisecond},
		Route: &route.Config{OutlierFactor: -1},
	}, watertight.HTTPOptions{FirstByteTimeout: 100 * time.Millisecond, Endpoints: []watertight.HTTPEndpoint{
		{Endpoint: route.Endpoint{Name: "mute"}, BaseURL: muteSrv.URL},
		{Endpoint: route.Endpoint{Name: "live"}, BaseURL: liveSrv.URL},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 4 {
		resp, err := c.Get("http://api.invalid/chat")
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len("data: one\n\n"))
		if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "data: one\n\n" {
			t.Fatalf("first event %q, %v", buf, err)
		}
		if st := c.Pipeline.Router().Status(); st[1].InFlight != 1 {
			t.Errorf("Status while the stream is read = %+v; want its call in flight on live", st)
		}
		next <- struct{}{}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if st := c.Pipeline.Router().Status(); st[0].InFlight+st[1].InFlight != 0 {
			t.Errorf("Status after the stream = %+v; want nothing in flight", st)
		}
	}
	if mute.n() == 0 || live.n() != 4 {
		t.Errorf("mute got %d requests, live %d; want mute tried and timed out, live to answer all 4", mute.n(), live.n())
	}
}

// TestHTTPClientEndpointBodyReplay checks that a request's body goes whole
// to each endpoint an attempt is sent to.
func TestHTTPClientEndpointBodyReplay(t *testing.T) {
	var bodies []string
	var mu sync.Mutex
	h := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies = append(bodies, string(b))
			mu.Unlock()
			w.WriteHeader(status)
		}
	}
	var s1, s2 seen
	failing := endpointServer(t, &s1, h(http.StatusServiceUnavailable))
	ok := endpointServer(t, &s2, h(http.StatusOK))
	c, err := watertight.NewHTTPClient("chat", watertight.Config{
		Retry: &retry.Config{MaxAttempts: 2, InitialInterval: time.Millisecond},
		Route: &route.Config{OutlierFactor: -1},
	}, watertight.HTTPOptions{Endpoints: []watertight.HTTPEndpoint{
		{Endpoint: route.Endpoint{Name: "failing"}, BaseURL: failing.URL},
		{Endpoint: route.Endpoint{Name: "ok"}, BaseURL: ok.URL},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 10 {
		resp, err := c.Post("http://api.invalid/x", "application/json", strings.NewReader(`{"prompt":"hello"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d; want the ok endpoint's 200 (a 503 is retried, POST or not)", resp.StatusCode)
		}
	}
	for _, b := range bodies {
		if b != `{"prompt":"hello"}` {
			t.Errorf("an endpoint got the body %q; want it whole", b)
		}
	}
	if s1.n() == 0 {
		t.Errorf("the failing endpoint got no request; the replay was not tested")
	}
}

// TestHTTPClientEndpointHeaderReplaces checks that an endpoint's header
// replaces the request's of the same name, however the request spells it.
func TestHTTPClientEndpointHeaderReplaces(t *testing.T) {
	got := make(chan []string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Values("Api-Key")
	}))
	defer srv.Close()
	c, err := watertight.NewHTTPClient("chat", watertight.Config{}, watertight.HTTPOptions{Endpoints: []watertight.HTTPEndpoint{
		{Endpoint: route.Endpoint{Name: "eu"}, BaseURL: srv.URL, Header: http.Header{"api-key": {"endpoint"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req, _ := http.NewRequest(http.MethodGet, "http://api.invalid/", nil)
	req.Header["api-key"] = []string{"caller"} // set directly, not canonical
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := <-got; len(v) != 1 || v[0] != "endpoint" {
		t.Errorf("the endpoint got Api-Key %q; want only the endpoint's", v)
	}
	if req.Header["api-key"][0] != "caller" {
		t.Errorf("the caller's request changed: %v", req.Header)
	}
}

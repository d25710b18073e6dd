package watertight_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/route"
)

// settles is a shared quota that admits every attempt and records each
// settlement.
type settles struct {
	mu  sync.Mutex
	got [][2]int // {cost, used}
}

func (*settles) Take(context.Context, int, time.Time) error { return nil }
func (*settles) Hold(time.Duration)                         {}

func (s *settles) Settle(cost, used int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, [2]int{cost, used})
}

func (s *settles) all() [][2]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][2]int(nil), s.got...)
}

// llmServer answers /messages with an Anthropic message and /stream with
// an Anthropic event stream.
func llmServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n")
			w.(http.Flusher).Flush()
			io.WriteString(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"type":"message","content":[{"type":"text","text":"Hi"}],"usage":{"input_tokens":12,"output_tokens":6}}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A client of NewHTTPClient under a shared quota settles each attempt at
// the provider's usage, routed or not, with no code of the caller's.
func TestHTTPClientSettlesAtUsage(t *testing.T) {
	srv := llmServer(t)
	for _, routed := range []bool{false, true} {
		shared := &settles{}
		var h watertight.HTTPOptions
		url := srv.URL
		if routed {
			h.Endpoints = []watertight.HTTPEndpoint{{Endpoint: route.Endpoint{Name: "a"}, BaseURL: srv.URL}}
			url = "http://llm.invalid"
		}
		c, err := watertight.NewHTTPClient("llm", watertight.Config{RateLimit: &ratelimit.Config{Shared: shared}}, h)
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/messages", "/stream"} {
			req, _ := http.NewRequestWithContext(ratelimit.WithCost(context.Background(), 100), http.MethodPost, url+path, strings.NewReader(`{}`))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		c.Close()
		if got := shared.all(); len(got) != 2 || got[0] != [2]int{100, 18} || got[1] != [2]int{100, 40} {
			t.Errorf("routed %v: settled %v, want [[100 18] [100 40]]", routed, got)
		}
	}
}

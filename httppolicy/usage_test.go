package httppolicy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/ratelimit"
)

// settleRecorder is a shared quota that admits every attempt and records
// each settlement.
type settleRecorder struct {
	mu      sync.Mutex
	settled [][2]int // {cost, used}
}

func (*settleRecorder) Take(context.Context, int, time.Time) error { return nil }
func (*settleRecorder) Hold(time.Duration)                         {}

func (r *settleRecorder) Settle(cost, used int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settled = append(r.settled, [2]int{cost, used})
}

func (r *settleRecorder) all() [][2]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][2]int(nil), r.settled...)
}

// usageServer answers as the providers do, by path.
func usageServer(t *testing.T) *httptest.Server {
	t.Helper()
	bodies := map[string]struct {
		status  int
		ct      string
		body    string
		abort   bool // the connection breaks after the body
		perLine bool // flushed event by event
	}{
		"/chat":              {200, "application/json", openAIChatBody, false, false},
		"/chat/stream":       {200, "text/event-stream", openAIChatStream, false, true},
		"/responses":         {200, "application/json", openAIResponsesBody, false, false},
		"/responses/stream":  {200, "text/event-stream", openAIResponsesStream, false, true},
		"/messages":          {200, "application/json; charset=utf-8", anthropicBody, false, false},
		"/messages/stream":   {200, "text/event-stream; charset=utf-8", anthropicStream, false, true},
		"/messages/cut":      {200, "text/event-stream", anthropicHead + anthropicDelta, true, true},
		"/missing":           {200, "application/json", `{"id":"chatcmpl-1","choices":[]}`, false, false},
		"/bad":               {200, "application/json", usageBody(`{"total_tokens":"29"}`), false, false},
		"/huge":              {200, "application/json", usageBody(`{"total_tokens":2147483648}`), false, false},
		"/stream/bad":        {200, "text/event-stream", "data: " + usageBody(`{"total_tokens":-4}`) + "\n\n", false, true},
		"/text":              {200, "text/plain", openAIChatBody, false, false},
		"/error":             {500, "application/json", `{"error":{"message":"The server had an error.","type":"server_error"}}`, false, false},
		"/error/with/usage":  {500, "application/json", usageBody(`{"total_tokens":7}`), false, false},
		"/large":             {200, "application/json", `{"content":"` + strings.Repeat("x", 200<<10) + `","usage":{"total_tokens":11}}`, false, false},
		"/large/stream/head": {200, "text/event-stream", strings.Repeat(": keepalive\n", 100) + openAIChatStream, false, false},
	}
	return newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, ok := bodies[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", b.ct)
		w.WriteHeader(b.status)
		if !b.perLine {
			io.WriteString(w, b.body)
			return
		}
		for ev := range strings.SplitAfterSeq(b.body, "\n\n") {
			io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
		if b.abort {
			panic(http.ErrAbortHandler)
		}
	})
}

func newTestServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// A Transport under a Limiter with a shared quota settles each attempt at
// the usage the provider's response gives, whole or streamed, with or
// without stream timeouts; at the declared cost without a usage it can
// read; at 0 for a failure without one; and a stream cut after a
// message_delta at what it got.
func TestTransportReportsUsage(t *testing.T) {
	srv := usageServer(t)
	for _, timeouts := range []bool{false, true} {
		rec := &settleRecorder{}
		lim, err := ratelimit.New(ratelimit.Config{Name: "llm", Shared: rec})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		pl, err := compose.New("llm", compose.Policies{RateLimit: lim})
		if err != nil {
			t.Fatal(err)
		}
		base := NewDependencyTransport(4)
		t.Cleanup(base.CloseIdleConnections)
		tr := &Transport{Base: base, Policy: pl}
		if timeouts {
			tr.FirstByteTimeout, tr.IdleTimeout = time.Minute, time.Minute
		}
		client := &http.Client{Transport: tr}
		for i, tt := range []struct {
			path    string
			status  int
			readErr bool
			used    int
		}{
			{"/chat", 200, false, 29},
			{"/chat/stream", 200, false, 21},
			{"/responses", 200, false, 380},
			{"/responses/stream", 200, false, 48},
			{"/messages", 200, false, 118},
			{"/messages/stream", 200, false, 40},
			{"/messages/cut", 200, true, 40},
			{"/missing", 200, false, 500},
			{"/bad", 200, false, 500},
			{"/huge", 200, false, 500},
			{"/stream/bad", 200, false, 500},
			{"/text", 200, false, 500},
			{"/error", 500, false, 0},
			{"/error/with/usage", 500, false, 7},
			{"/large", 200, false, 11},
			{"/large/stream/head", 200, false, 21},
		} {
			ctx := ratelimit.WithCost(context.Background(), 500)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+tt.path, strings.NewReader(`{}`))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("timeouts %v, %s: %v", timeouts, tt.path, err)
			}
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if (err != nil) != tt.readErr || resp.StatusCode != tt.status {
				t.Errorf("timeouts %v, %s: status %d, read error %v", timeouts, tt.path, resp.StatusCode, err)
			}
			settled := rec.all()
			if want := [2]int{500, tt.used}; len(settled) != i+1 || settled[i] != want {
				t.Errorf("timeouts %v, %s: settled %v, want %v once more", timeouts, tt.path, settled, want)
			}
		}
	}
}

// A caller that decodes the body and closes it without reading its EOF
// still has the usage reported: it is read as soon as its object ends.
func TestTransportReportsUsageBeforeEOF(t *testing.T) {
	srv := usageServer(t)
	rec := &settleRecorder{}
	lim, err := ratelimit.New(ratelimit.Config{Shared: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	pl, err := compose.New("llm", compose.Policies{RateLimit: lim})
	if err != nil {
		t.Fatal(err)
	}
	base := NewDependencyTransport(1)
	t.Cleanup(base.CloseIdleConnections)
	client := &http.Client{Transport: &Transport{Base: base, Policy: pl}}
	req, _ := http.NewRequestWithContext(ratelimit.WithCost(context.Background(), 500), http.MethodGet, srv.URL+"/messages", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// Every byte but the last brace.
	if _, err := io.ReadFull(resp.Body, make([]byte, len(anthropicBody)-1)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := rec.all(); len(got) != 1 || got[0] != [2]int{500, 118} {
		t.Errorf("settled %v, want [[500 118]]", got)
	}
}

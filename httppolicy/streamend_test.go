package httppolicy_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
)

const (
	openAIStream = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n"
	openAIDone         = "data: [DONE]\n\n"
	anthropicStream    = "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hello\"}}\n\n"
	anthropicStop      = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	anthropicPingThenX = "event: ping\ndata: {}\n\n"
)

// sseBase answers with an event stream whose body is body, read one byte
// at a time.
type sseBase struct{ body string }

func (b sseBase) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Request: req, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(iotest.OneByteReader(strings.NewReader(b.body)))}, nil
}

// streamThrough reads a whole response from a Transport with end as its
// StreamEnd (and a first-byte timeout if watched) through a breaker that
// opens on one failure; it returns what the body read, its final error,
// and the breaker.
func streamThrough(t *testing.T, body string, end *httppolicy.StreamEnd, watched bool) (string, error, *breaker.Breaker) {
	t.Helper()
	br := newBreaker(t, 1)
	tr := &httppolicy.Transport{Base: sseBase{body}, Policy: newPipeline(t, compose.Policies{Breaker: br}), StreamEnd: end}
	if watched {
		tr.FirstByteTimeout, tr.IdleTimeout = time.Minute, time.Minute
	}
	req, _ := http.NewRequest(http.MethodPost, "http://llm.test/v1/chat/completions", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(got), err, br
}

// A stream that ends with its terminal event ends cleanly; one cut before
// it ends its last Read with ErrStreamCut (io.ErrUnexpectedEOF), after
// every byte that came, and the breaker counts a failure.
func TestStreamEnd(t *testing.T) {
	for _, tt := range []struct {
		name string
		body string
		end  *httppolicy.StreamEnd
		cut  bool
	}{
		{"openai whole", openAIStream + openAIDone, &httppolicy.OpenAIStreamEnd, false},
		{"openai cut", openAIStream, &httppolicy.OpenAIStreamEnd, true},
		{"openai cut in the terminal event", openAIStream + "data: [DONE]\n", &httppolicy.OpenAIStreamEnd, true},
		{"openai [DONE] with CRLF", openAIStream + "data: [DONE]\r\n\r\n", &httppolicy.OpenAIStreamEnd, false},
		{"openai [DONE]x is not it", openAIStream + "data: [DONE]x\n\n", &httppolicy.OpenAIStreamEnd, true},
		{"anthropic whole", anthropicStream + anthropicStop, &httppolicy.AnthropicStreamEnd, false},
		{"anthropic cut", anthropicStream + anthropicPingThenX, &httppolicy.AnthropicStreamEnd, true},
		{"anthropic: message_stop as data only is not it", anthropicStream + "data: message_stop\n\n", &httppolicy.AnthropicStreamEnd, true},
		{"anthropic: an event type without data is no event", anthropicStream + "event: message_stop\n\ndata: {\"partial\":true}\n\n", &httppolicy.AnthropicStreamEnd, true},
		{"openai: [DONE] without its blank line is cut", openAIStream + "data: [DONE]", &httppolicy.OpenAIStreamEnd, true},
		{"empty stream", "", &httppolicy.OpenAIStreamEnd, true},
		{"no StreamEnd", openAIStream, nil, false},
	} {
		for _, watched := range []bool{false, true} {
			name := tt.name
			if watched {
				name += " watched"
			}
			t.Run(name, func(t *testing.T) {
				got, err, br := streamThrough(t, tt.body, tt.end, watched)
				if got != tt.body {
					t.Fatalf("read %q, want every byte %q", got, tt.body)
				}
				if !tt.cut {
					if err != nil || br.State() != breaker.Closed {
						t.Fatalf("err %v, breaker %v; want nil, closed", err, br.State())
					}
					return
				}
				if !errors.Is(err, httppolicy.ErrStreamCut) || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("err %v, want ErrStreamCut", err)
				}
				if br.State() != breaker.Open {
					t.Fatalf("breaker %v after a cut stream, want open (one failure)", br.State())
				}
			})
		}
	}
}

// A body that is no event stream is never cut.
func TestStreamEndIgnoresOtherBodies(t *testing.T) {
	base := baseFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Request: req, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"ok":true}`))}, nil
	})
	tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{}), StreamEnd: &httppolicy.OpenAIStreamEnd}
	req, _ := http.NewRequest(http.MethodGet, "http://dep.test/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
}

// An empty StreamEnd, or one too long to match, makes RoundTrip fail,
// naming the field.
func TestStreamEndInvalid(t *testing.T) {
	for _, end := range []httppolicy.StreamEnd{{}, {Event: strings.Repeat("x", 65)}, {Data: strings.Repeat("x", 65)}} {
		tr := &httppolicy.Transport{Base: sseBase{""}, Policy: newPipeline(t, compose.Policies{}), StreamEnd: &end}
		req, _ := http.NewRequest(http.MethodGet, "http://dep.test/", nil)
		if _, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "Transport.StreamEnd") {
			t.Fatalf("StreamEnd %+v: err %v, want one naming Transport.StreamEnd", end, err)
		}
	}
}

type baseFunc func(*http.Request) (*http.Response, error)

func (f baseFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// An event stream with no body at all (Content-Length: 0) was cut too:
// its attempt fails with ErrStreamCut, a breaker failure.
func TestStreamEndEmptyBody(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
	})
	br := newBreaker(t, 1)
	tr := &httppolicy.Transport{Base: newBase(t, 1), Policy: newPipeline(t, compose.Policies{Breaker: br}), StreamEnd: &httppolicy.OpenAIStreamEnd}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, httppolicy.ErrStreamCut) || br.State() != breaker.Open {
		t.Fatalf("err %v, breaker %v; want ErrStreamCut, open", err, br.State())
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// API says which provider's wire format a [Fake] speaks.
type API int

const (
	// OpenAIAPI is POST /v1/chat/completions: a chat.completion JSON, or SSE
	// "data:" chunks ending with "data: [DONE]".
	OpenAIAPI API = iota
	// AnthropicAPI is POST /v1/messages: a message JSON, or SSE frames that
	// each carry an "event:" line (message_start ... message_stop).
	AnthropicAPI
)

// String returns "openai" or "anthropic".
func (a API) String() string {
	if a == AnthropicAPI {
		return "anthropic"
	}
	return "openai"
}

// Mode is how a [Fake] answers one request.
type Mode string

// The modes of a Fake.
const (
	// OK answers at once (a stream still paces its chunks by ChunkGap).
	OK Mode = "ok"
	// Slow waits FakeConfig.Delay before answering as OK.
	Slow Mode = "slow"
	// TooMany answers 429 with Retry-After-Ms (and Retry-After, rounded up
	// to whole seconds), as both providers do.
	TooMany Mode = "429"
	// Fail answers 500 with the provider's error JSON.
	Fail Mode = "500"
	// Hang never answers: the request ends when the client gives up or
	// the Fake is closed.
	Hang Mode = "hang"
)

// FakeConfig tunes a [Fake]. Zero fields take the defaults of [NewFake].
type FakeConfig struct {
	Delay      time.Duration // Slow: wait before answering (default 300ms)
	RetryAfter time.Duration // TooMany: the wait asked for (default 100ms)
	ChunkGap   time.Duration // streams: pause between chunks (default 0)
}

// Fake is a local LLM provider: an httptest server speaking one provider's
// JSON and SSE shapes, whose answers are scripted per request. It is safe
// for concurrent use.
type Fake struct {
	API API
	URL string // the server's root, http://127.0.0.1:port

	cfg  FakeConfig
	srv  *httptest.Server
	done chan struct{} // closed by Close: ends hanging requests

	mu       sync.Mutex
	script   []Mode // answers for the next requests, in order
	mode     Mode   // the answer once the script is used up
	arrivals []time.Time
	closed   bool
}

// NewFake starts a fake provider for api that answers OK until told
// otherwise. Close it when done.
func NewFake(api API, cfg FakeConfig) *Fake {
	if cfg.Delay == 0 {
		cfg.Delay = 300 * time.Millisecond
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = 100 * time.Millisecond
	}
	f := &Fake{API: api, cfg: cfg, mode: OK, done: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	f.URL = f.srv.URL
	return f
}

// BaseURL is the URL to give the provider's SDK with option.WithBaseURL:
// openai-go appends "chat/completions" to it, anthropic-sdk-go
// "v1/messages".
func (f *Fake) BaseURL() string {
	if f.API == OpenAIAPI {
		return f.URL + "/v1/"
	}
	return f.URL + "/"
}

// Script sets the answers to the next requests, one mode per request in
// order; after them the fake answers with the mode set by SetMode.
func (f *Fake) Script(modes ...Mode) {
	f.mu.Lock()
	f.script = append([]Mode(nil), modes...)
	f.mu.Unlock()
}

// SetMode sets the answer to every request the script does not cover.
func (f *Fake) SetMode(m Mode) {
	f.mu.Lock()
	f.mode = m
	f.mu.Unlock()
}

// Requests returns the number of requests the fake has received.
func (f *Fake) Requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.arrivals)
}

// Arrivals returns the time each request arrived, in order.
func (f *Fake) Arrivals() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.arrivals...)
}

// Close ends hanging requests and shuts the server down. It is idempotent.
func (f *Fake) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	close(f.done)
	f.mu.Unlock()
	f.srv.Close()
}

// next records a request's arrival and returns the mode it gets.
func (f *Fake) next() Mode {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arrivals = append(f.arrivals, time.Now())
	if len(f.script) > 0 {
		m := f.script[0]
		f.script = f.script[1:]
		return m
	}
	return f.mode
}

// wait sleeps d, and reports false if the request or the fake ended first.
func (f *Fake) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-f.done:
	}
	return false
}

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	path := "/v1/chat/completions"
	if f.API == AnthropicAPI {
		path = "/v1/messages"
	}
	if r.URL.Path != path || r.Method != http.MethodPost {
		f.writeError(w, http.StatusNotFound, "not_found_error", "no such route: "+r.Method+" "+r.URL.Path)
		return
	}
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		f.writeError(w, http.StatusBadRequest, "invalid_request_error", "bad JSON: "+err.Error())
		return
	}
	ctx := r.Context()
	switch f.next() {
	case Hang:
		select {
		case <-ctx.Done():
		case <-f.done:
		}
		return
	case Slow:
		if !f.wait(ctx, f.cfg.Delay) {
			return
		}
	case TooMany:
		ra := f.cfg.RetryAfter
		w.Header().Set("Retry-After-Ms", strconv.FormatInt(ra.Milliseconds(), 10))
		w.Header().Set("Retry-After", strconv.FormatInt(int64((ra+time.Second-1)/time.Second), 10))
		f.writeError(w, http.StatusTooManyRequests, "rate_limit_error", "slow down")
		return
	case Fail:
		f.writeError(w, http.StatusInternalServerError, "api_error", "the fake provider failed")
		return
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, f.completion(req.Model))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	for i, frame := range f.frames(req.Model) {
		if i > 0 && !f.wait(ctx, f.cfg.ChunkGap) {
			return
		}
		io.WriteString(w, frame)
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// chunks is the text every answer is made of.
func (f *Fake) chunks() []string {
	return []string{"Hello", " from", " the", " fake", " " + f.API.String() + "."}
}

func (f *Fake) completion(model string) string {
	text := strings.Join(f.chunks(), "")
	if f.API == OpenAIAPI {
		return fmt.Sprintf(`{"id":"chatcmpl-fake","object":"chat.completion","created":1700000000,"model":%q,`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":%q,"refusal":null},"logprobs":null,"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":5,"completion_tokens":5,"total_tokens":10}}`, model, text)
	}
	return fmt.Sprintf(`{"id":"msg_fake","type":"message","role":"assistant","model":%q,`+
		`"content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,`+
		`"usage":{"input_tokens":5,"output_tokens":5}}`, model, text)
}

// frames returns the SSE frames of a streamed answer.
func (f *Fake) frames(model string) []string {
	var out []string
	if f.API == OpenAIAPI {
		chunk := func(delta, finish string) string {
			return fmt.Sprintf(`data: {"id":"chatcmpl-fake","object":"chat.completion.chunk","created":1700000000,"model":%q,`+
				`"choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`+"\n\n", model, delta, finish)
		}
		for i, c := range f.chunks() {
			role := ""
			if i == 0 {
				role = `"role":"assistant",`
			}
			out = append(out, chunk(fmt.Sprintf(`{%s"content":%q}`, role, c), "null"))
		}
		return append(out, chunk(`{}`, `"stop"`), "data: [DONE]\n\n")
	}
	event := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	out = append(out,
		event("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_fake","type":"message","role":"assistant",`+
			`"model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}}`, model)),
		event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
	for _, c := range f.chunks() {
		out = append(out, event("content_block_delta",
			fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, c)))
	}
	return append(out,
		event("content_block_stop", `{"type":"content_block_stop","index":0}`),
		event("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`),
		event("message_stop", `{"type":"message_stop"}`))
}

// writeError answers with status and the provider's error JSON.
func (f *Fake) writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if f.API == OpenAIAPI {
		fmt.Fprintf(w, `{"error":{"message":%q,"type":%q,"param":null,"code":null}}`, msg, typ)
		return
	}
	fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":%q}}`, typ, msg)
}

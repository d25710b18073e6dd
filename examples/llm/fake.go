package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
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
	// Stall streams FakeConfig.StallAfter events of the answer, then only
	// keepalives (": ping" comments for OpenAI, "event: ping" for
	// Anthropic) every FakeConfig.Keepalive until the client gives up: a
	// dead stream that looks alive. A request that is not streamed hangs.
	Stall Mode = "stall"
	// Any other mode that is a number, such as "503" or "400", answers
	// with that status and the provider's error JSON.

	// Late sends the headers at once, then only keepalives for
	// FakeConfig.Delay, then the answer: a replica slow to its first token.
	Late Mode = "late"
	// Spent answers as a provider whose quota or credit is used up: OpenAI
	// a 429 with the code insufficient_quota, Anthropic a 402
	// billing_error.
	Spent Mode = "spent"
	// Cut streams the answer without its terminal event (OpenAI's
	// "data: [DONE]", Anthropic's message_stop) and ends the response:
	// a stream cut short that looks whole. A request that is not streamed
	// is answered as OK.
	Cut Mode = "cut"
)

// FakeConfig tunes a [Fake]. Zero fields take the defaults of [NewFake].
type FakeConfig struct {
	Delay      time.Duration // Slow, Late: wait before answering (default 300ms)
	RetryAfter time.Duration // TooMany: the wait asked for (default 100ms)
	ChunkGap   time.Duration // streams: pause between chunks (default 0)
	Keepalive  time.Duration // Stall, Late: pause between keepalives (default 50ms)
	StallAfter int           // Stall: events sent before the stall (default 3)
	Service    time.Duration // every answer: time taken before answering (default 0)

	// Quota, if set, rations the answers as a provider's rate limits do;
	// without it the rate-limit headers say the quota is far from spent.
	Quota *Quota

	// InMemory serves on an in-memory network (net.Pipe connections)
	// instead of a loopback port: clients must dial it with [Fake.Dial].
	// Everything then blocks on channels and timers alone, so a test can
	// run the fake, the SDKs and watertight in a testing/synctest bubble,
	// in simulated time.
	InMemory bool
}

// Quota is a provider's rate limit: Requests requests and Tokens tokens per
// Window, each bucket refilled continuously, every call costing CallTokens
// tokens. A request over quota is answered 429 with Retry-After (whole
// seconds, rounded up, at least 1) and, like every answer, the provider's rate-limit
// headers: OpenAI's x-ratelimit-limit|remaining|reset-requests|tokens (the
// reset is the time until the bucket is full, as a Go duration such as
// "1.2s"), Anthropic's anthropic-ratelimit-requests|tokens-limit|remaining|reset
// (RFC 3339).
type Quota struct {
	Requests   int
	Tokens     int
	Window     time.Duration
	CallTokens int
	// StartEmpty starts both buckets empty rather than full: the quota
	// is spent from the first request (a short run's steady state).
	StartEmpty bool
}

// Fake is a local LLM provider: an httptest server speaking one provider's
// JSON and SSE shapes, whose answers are scripted per request. It is safe
// for concurrent use.
type Fake struct {
	API API
	URL string // the server's root, http://127.0.0.1:port

	cfg  FakeConfig
	srv  *httptest.Server // nil if InMemory
	mem  *http.Server     // InMemory: serves the connections of pipes
	pipe *pipeListener    // InMemory: hands mem the server ends of Dial's pipes
	done chan struct{}    // closed by Close: ends hanging requests

	mu       sync.Mutex
	script   []Mode // answers for the next requests, in order
	mode     Mode   // the answer once the script is used up
	arrivals []time.Time
	closed   bool
	reqs     float64   // Quota: requests left in the bucket
	toks     float64   // Quota: tokens left in the bucket
	last     time.Time // Quota: when the buckets were last refilled
	start    time.Time
	n429     int // answers 429, by the quota or TooMany
	nOK      int // answers 200
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
	if cfg.Keepalive == 0 {
		cfg.Keepalive = 50 * time.Millisecond
	}
	if cfg.StallAfter == 0 {
		cfg.StallAfter = 3
	}
	f := &Fake{API: api, cfg: cfg, mode: OK, done: make(chan struct{}), start: time.Now()}
	if q := cfg.Quota; q != nil && !q.StartEmpty {
		f.reqs, f.toks = float64(q.Requests), float64(q.Tokens)
	}
	if cfg.InMemory {
		f.pipe = &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
		f.mem = &http.Server{Handler: http.HandlerFunc(f.serve)}
		go f.mem.Serve(f.pipe)
		f.URL = "http://" + api.String() + ".fake"
		return f
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	f.URL = f.srv.URL
	return f
}

// Dial connects to the fake, whatever network and address it is given: for
// http.Transport.DialContext (or [Limits.Dial]). An InMemory fake answers on
// the other end of a net.Pipe; any other is dialled on its loopback port.
func (f *Fake) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	if f.pipe == nil {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", strings.TrimPrefix(f.URL, "http://"))
	}
	client, server := net.Pipe()
	select {
	case f.pipe.conns <- server:
		return client, nil
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	case <-f.pipe.done:
		client.Close()
		server.Close()
		return nil, net.ErrClosed
	}
}

// pipeListener is the net.Listener of an InMemory fake: Accept returns the
// server ends of the pipes Dial makes.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "fake" }

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

// Counts returns the number of answers 429 and 200 the fake has sent.
func (f *Fake) Counts() (n429, nOK int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n429, f.nOK
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
	if f.mem != nil {
		f.mem.Close() // closes the listener and every connection
		return
	}
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
	mode := f.next()
	f.identify(w)
	if !f.wait(ctx, f.cfg.Service) {
		return
	}
	if mode != TooMany && f.cfg.Quota != nil {
		if over, retryAfter := f.admit(w.Header()); over {
			// Whole seconds, rounded up, at least 1, as the providers send it.
			w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64(math.Ceil(retryAfter.Seconds()))), 10))
			f.writeError(w, http.StatusTooManyRequests, "rate_limit_error", "rate limit reached for requests")
			return
		}
	} else {
		f.admit(w.Header())
	}
	if !f.before(ctx, w, mode) {
		return
	}
	if !req.Stream {
		if mode == Stall {
			select {
			case <-ctx.Done():
			case <-f.done:
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		f.count(false)
		io.WriteString(w, f.completion(req.Model))
		return
	}
	f.stream(ctx, w, mode, req.Model)
}

// stream answers with the frames of a streamed answer, as mode says.
func (f *Fake) stream(ctx context.Context, w http.ResponseWriter, mode Mode, model string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f.count(false)
	flusher, _ := w.(http.Flusher)
	send := func(s string) {
		io.WriteString(w, s)
		if flusher != nil {
			flusher.Flush()
		}
	}
	if flusher != nil {
		flusher.Flush() // the headers go at once, as the providers send them
	}
	if mode == Late && !f.keepalives(ctx, send, f.cfg.Delay) {
		return
	}
	frames := f.frames(model)
	if mode == Cut {
		frames = frames[:len(frames)-1]
	}
	for i, frame := range frames {
		if mode == Stall && i == f.cfg.StallAfter {
			f.keepalives(ctx, send, -1)
			return
		}
		if i > 0 && !f.wait(ctx, f.cfg.ChunkGap) {
			return
		}
		send(frame)
		if i == 0 && f.API == AnthropicAPI {
			// Anthropic sends a ping after message_start.
			send(f.keepalive())
		}
	}
}

// before plays the part of mode that comes before any answer: a hang, a
// delay, or an error status. It reports whether an answer is to follow.
func (f *Fake) before(ctx context.Context, w http.ResponseWriter, mode Mode) bool {
	switch mode {
	case Hang:
		select {
		case <-ctx.Done():
		case <-f.done:
		}
		return false
	case Slow:
		return f.wait(ctx, f.cfg.Delay)
	case TooMany:
		ra := f.cfg.RetryAfter
		w.Header().Set("Retry-After-Ms", strconv.FormatInt(ra.Milliseconds(), 10))
		w.Header().Set("Retry-After", strconv.FormatInt(int64((ra+time.Second-1)/time.Second), 10))
		f.count(true)
		f.writeError(w, http.StatusTooManyRequests, "rate_limit_error", "slow down")
		return false
	case Fail:
		f.writeError(w, http.StatusInternalServerError, "api_error", "the fake provider failed")
		return false
	case Spent:
		f.writeSpent(w)
		return false
	}
	if code, err := strconv.Atoi(string(mode)); err == nil {
		f.writeError(w, code, "api_error", "the fake provider answered "+string(mode))
		return false
	}
	return true
}

// keepalive returns the provider's keepalive: an SSE comment for OpenAI,
// a ping event for Anthropic.
func (f *Fake) keepalive() string {
	if f.API == AnthropicAPI {
		return "event: ping\ndata: {\"type\": \"ping\"}\n\n"
	}
	return ": ping\n\n"
}

// keepalives sends a keepalive every cfg.Keepalive for d (for ever if d is
// negative), and reports false if the request or the fake ended first.
func (f *Fake) keepalives(ctx context.Context, send func(string), d time.Duration) bool {
	end := time.Now().Add(d)
	for d < 0 || time.Now().Before(end) {
		send(f.keepalive())
		step := f.cfg.Keepalive
		if left := time.Until(end); d >= 0 && left < step {
			step = left
		}
		if !f.wait(ctx, step) {
			return false
		}
	}
	return true
}

// identify sets the headers every answer of the provider carries.
func (f *Fake) identify(w http.ResponseWriter) {
	h := w.Header()
	if f.API == OpenAIAPI {
		h.Set("X-Request-Id", "req_fake")
		h.Set("Openai-Version", "2020-10-01")
		h.Set("Openai-Processing-Ms", "1")
		return
	}
	h.Set("Request-Id", "req_fake")
	h.Set("Anthropic-Organization-Id", "org-fake")
}

// count records an answer.
func (f *Fake) count(throttled bool) {
	f.mu.Lock()
	if throttled {
		f.n429++
	} else {
		f.nOK++
	}
	f.mu.Unlock()
}

// admit takes one request and cfg.Quota.CallTokens tokens from the quota,
// if there is one, sets the rate-limit headers, and says whether the
// request is over quota (counted as a 429) and how long until it would
// not be.
func (f *Fake) admit(h http.Header) (over bool, retryAfter time.Duration) {
	q := f.cfg.Quota
	if q == nil {
		q = &Quota{Requests: 10000, Tokens: 2000000, Window: time.Minute, CallTokens: 10}
	}
	f.mu.Lock()
	now := time.Now()
	if f.cfg.Quota == nil {
		f.reqs, f.toks = float64(q.Requests), float64(q.Tokens)
	} else if f.last.IsZero() {
		f.last = f.start
	}
	if f.cfg.Quota != nil {
		el := now.Sub(f.last).Seconds() / q.Window.Seconds()
		f.reqs = math.Min(float64(q.Requests), f.reqs+el*float64(q.Requests))
		f.toks = math.Min(float64(q.Tokens), f.toks+el*float64(q.Tokens))
	}
	f.last = now
	cost := float64(q.CallTokens)
	// A bucket within a rounding error of what the call needs has it: the
	// refill's float arithmetic must not refuse a request the quota allows
	// (and answer it with a Retry-After of 0).
	over = f.reqs < 1-1e-9 || f.toks < cost-1e-6
	if over {
		f.n429++
		needR := math.Max(0, 1-f.reqs) / float64(q.Requests)
		needT := math.Max(0, cost-f.toks) / float64(q.Tokens)
		retryAfter = time.Duration(math.Max(needR, needT) * float64(q.Window))
	} else {
		f.reqs--
		f.toks -= cost
	}
	reqs, toks := f.reqs, f.toks
	f.mu.Unlock()
	full := func(left float64, limit int) time.Duration {
		return time.Duration((float64(limit) - left) / float64(limit) * float64(q.Window)).Round(time.Millisecond)
	}
	rr, rt := full(reqs, q.Requests), full(toks, q.Tokens)
	if f.API == OpenAIAPI {
		h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(q.Requests))
		h.Set("X-Ratelimit-Limit-Tokens", strconv.Itoa(q.Tokens))
		h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(int(reqs)))
		h.Set("X-Ratelimit-Remaining-Tokens", strconv.Itoa(int(toks)))
		h.Set("X-Ratelimit-Reset-Requests", rr.String())
		h.Set("X-Ratelimit-Reset-Tokens", rt.String())
		return over, retryAfter
	}
	for _, kind := range []string{"requests", "tokens", "input-tokens", "output-tokens"} {
		limit, left, reset := q.Tokens, toks, rt
		if kind == "requests" {
			limit, left, reset = q.Requests, reqs, rr
		}
		h.Set("Anthropic-Ratelimit-"+kind+"-Limit", strconv.Itoa(limit))
		h.Set("Anthropic-Ratelimit-"+kind+"-Remaining", strconv.Itoa(int(left)))
		h.Set("Anthropic-Ratelimit-"+kind+"-Reset", now.Add(reset).UTC().Format(time.RFC3339))
	}
	return over, retryAfter
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

// writeSpent answers as the provider does once the caller's quota or
// credit is used up.
func (f *Fake) writeSpent(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	if f.API == OpenAIAPI {
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.",`+
			`"type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`)
		return
	}
	w.WriteHeader(http.StatusPaymentRequired)
	io.WriteString(w, `{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low."}}`)
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

package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The provider's quota: requests and tokens a second, each in a bucket of
// one second's quota.
const (
	quotaRequests = 20
	quotaTokens   = 6000
	burstRequests = quotaRequests
	burstTokens   = quotaTokens
)

// slack is the share of a burst the provider lets through beyond its
// buckets. A fleet that keeps to the quota is admitted by Redis's clock,
// and its requests reach the provider after delays that vary (the
// scheduler of a shared machine, a connection's set-up for a caller's
// first request), so requests admitted one turn apart can arrive closer:
// a bucket without slack would answer 429 to a fleet that kept the quota.
// A fifth of a burst absorbs 200 ms of such jitter, and lets an arm that
// presses on the buckets through by 4 requests more.
const slack = 0.2

// provider is a fake OpenAI-like chat completions API (POST
// /v1/chat/completions) with a quota of quotaRequests requests and
// quotaTokens tokens a second. Each quota is an exact GCRA bucket of one
// second's quota, plus slack, on one clock. A request that does not fit
// is answered 429 with a Retry-After of the whole seconds until it would,
// and charged nothing. A request that fits is charged one request and its
// usage: its prompt's tokens (a token for every 4 characters, rounded up)
// and a completion of between a quarter of its max_tokens and all of
// them.
type provider struct {
	srv  *http.Server
	url  string
	done chan struct{} // closed once srv has stopped serving

	mu     sync.Mutex
	epoch  time.Time
	reqTAT float64 // when the request bucket is empty, in seconds since epoch
	tokTAT float64 // when the token bucket is empty
	served []arrival
	n429   int
}

// arrival is one request the provider served: when, and its usage.
type arrival struct {
	at     time.Duration // since epoch
	tokens int
}

// startProvider serves a fresh provider on a free loopback port.
func startProvider() (*provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &provider{url: "http://" + ln.Addr().String(), done: make(chan struct{}), epoch: time.Now()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", p.complete)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { p.srv.Serve(ln); close(p.done) }()
	return p, nil
}

// close stops the provider and its connections.
func (p *provider) close() {
	p.srv.Close()
	<-p.done
}

// begin starts the provider's clock and counts afresh.
func (p *provider) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch, p.reqTAT, p.tokTAT, p.served, p.n429 = time.Now(), 0, 0, nil, 0
}

// chatRequest is the part of a chat completion request the provider reads.
type chatRequest struct {
	Model     string `json:"model"`
	MaxTokens int    `json:"max_tokens"`
	Messages  []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

// promptTokens counts a prompt's tokens as the provider does: one for
// every 4 characters, rounded up. The replicas estimate it so too.
func promptTokens(s string) int { return (len(s) + 3) / 4 }

// complete answers one chat completion, or 429 past the quota.
func (p *provider) complete(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.MaxTokens <= 0 {
		http.Error(w, `{"error":{"message":"bad request","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	prompt := 0
	for _, m := range req.Messages {
		prompt += promptTokens(m.Content)
	}
	completion := req.MaxTokens/4 + rand.IntN(req.MaxTokens-req.MaxTokens/4+1)
	if wait, ok := p.admit(prompt + completion); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
		return
	}
	// The answer's generation.
	t := time.NewTimer(time.Duration(20+rand.IntN(40)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"chatcmpl-fake","object":"chat.completion","model":%q,`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
		req.Model, prompt, completion, prompt+completion)
}

// admit charges a request of tokens to both buckets if both have room
// for it. Otherwise it charges nothing, counts a 429, and returns how long
// until the request would fit (at least a second).
func (p *provider) admit(tokens int) (time.Duration, bool) {
	const reqT, tokT = 1.0 / quotaRequests, 1.0 / quotaTokens
	p.mu.Lock()
	defer p.mu.Unlock()
	at := time.Since(p.epoch)
	now := at.Seconds()
	rq := max(p.reqTAT, now) + reqT
	tk := max(p.tokTAT, now) + float64(tokens)*tokT
	over := max(rq-now-(1+slack)*burstRequests*reqT, tk-now-(1+slack)*burstTokens*tokT)
	if over > 0 {
		p.n429++
		return max(time.Duration(over*float64(time.Second)), time.Second), false
	}
	p.reqTAT, p.tokTAT = rq, tk
	p.served = append(p.served, arrival{at, tokens})
	return 0, true
}

// result returns what the provider served and refused since begin.
func (p *provider) result() served {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := served{requests: len(p.served), n429: p.n429}
	if len(p.served) == 0 {
		return s
	}
	s.span = p.served[len(p.served)-1].at - p.served[0].at
	for _, a := range p.served {
		s.tokens += a.tokens
	}
	s.maxReqs, s.maxToks = window(p.served, time.Second)
	return s
}

// served is what the provider served over an arm.
type served struct {
	requests, tokens int
	n429             int
	span             time.Duration // from the first request served to the last
	maxReqs, maxToks int           // the most in any one second
}

// window returns the most requests and tokens of as (in order of
// arrival) in any interval d.
func window(as []arrival, d time.Duration) (reqs, toks int) {
	j, sum := 0, 0
	for i, a := range as {
		sum += a.tokens
		for as[j].at <= a.at-d {
			sum -= as[j].tokens
			j++
		}
		reqs, toks = max(reqs, i-j+1), max(toks, sum)
	}
	return reqs, toks
}

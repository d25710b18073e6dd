package httppolicy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
)

// provider is a fake LLM API whose quota of requests per window is a
// bucket refilled continuously, as OpenAI's and Anthropic's are: it answers
// with the real rate-limit headers of OpenAI (style "openai") or Anthropic
// ("anthropic") on every response, the reset being the time until the
// bucket is full again, and with a 429 and Retry-After over quota.
type provider struct {
	style  string
	quota  int
	window time.Duration

	mu     sync.Mutex
	left   float64   // requests left in the bucket
	last   time.Time // when left was last refilled
	ok     int
	tooMny int
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	p.mu.Lock()
	now := time.Now()
	if p.last.IsZero() {
		p.left = float64(p.quota)
	} else {
		p.left = min(float64(p.quota), p.left+now.Sub(p.last).Seconds()/p.window.Seconds()*float64(p.quota))
	}
	p.last = now
	over := p.left < 1
	if !over {
		p.left--
		p.ok++
	} else {
		p.tooMny++
	}
	left := p.left
	p.mu.Unlock()
	perUnit := p.window / time.Duration(p.quota)
	reset := time.Duration((float64(p.quota) - left) * float64(perUnit)) // until full
	next := time.Duration((1 - left) * float64(perUnit))                 // until one request frees
	remaining := int(left)

	h := w.Header()
	switch p.style {
	case "openai":
		h.Set("x-ratelimit-limit-requests", strconv.Itoa(p.quota))
		h.Set("x-ratelimit-remaining-requests", strconv.Itoa(remaining))
		h.Set("x-ratelimit-reset-requests", reset.String())
		h.Set("x-ratelimit-limit-tokens", "60000")
		h.Set("x-ratelimit-remaining-tokens", "59000")
		h.Set("x-ratelimit-reset-tokens", "1s")
	case "anthropic":
		// Anthropic's resets are whole seconds: round up.
		at := now.Add(reset).Truncate(time.Second).Add(time.Second).UTC()
		h.Set("anthropic-ratelimit-requests-limit", strconv.Itoa(p.quota))
		h.Set("anthropic-ratelimit-requests-remaining", strconv.Itoa(remaining))
		h.Set("anthropic-ratelimit-requests-reset", at.Format(time.RFC3339))
		h.Set("anthropic-ratelimit-tokens-remaining", "90000")
		h.Set("anthropic-ratelimit-tokens-reset", at.Format(time.RFC3339))
	}
	h.Set("Content-Type", "application/json")
	if over {
		h.Set("Retry-After", strconv.Itoa(int((next+time.Second-1)/time.Second)))
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"type":"rate_limit_error"}}`)
		return
	}
	fmt.Fprint(w, `{"id":"x","choices":[]}`)
}

func (p *provider) counts() (ok, tooMany int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ok, p.tooMny
}

// client returns an HTTP client whose Transport runs Retry -> RateLimit ->
// Breaker and feeds lim (nil: no limiter) from every response.
func client(t *testing.T, lim *ratelimit.Limiter) (*http.Client, *breaker.Breaker) {
	t.Helper()
	rt := mustOK[*retry.Retry](t)(retry.New(retry.Config{MaxAttempts: 4, InitialInterval: 10 * time.Millisecond, MaxInterval: 5 * time.Second}))
	br := mustOK[*breaker.Breaker](t)(breaker.New(breaker.Config{ConsecutiveFailures: 2}))
	t.Cleanup(func() { br.Close() })
	pols := compose.Policies{Retry: rt, Breaker: br}
	tr := &httppolicy.Transport{Base: &http.Transport{}, RetryUnsafe: true}
	if lim != nil {
		pols.RateLimit = lim
		tr.Signals = httppolicy.LimiterSignals(lim)
	}
	tr.Policy = mustOK[*compose.Pipeline](t)(compose.New("llm", pols))
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}, br
}

func post(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(`{"model":"m"}`))
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// The headers of a real provider hold the calls through the Transport's
// Signals: once a response says the quota is spent, the next call waits
// for one request's refill instead of drawing a 429, and the 429s that do come never
// open the breaker.
func TestFakeProviderHeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for real refills and Retry-Afters (up to 3 s)")
	}
	for _, style := range []string{"openai", "anthropic"} {
		t.Run(style, func(t *testing.T) {
			run := func(lim *ratelimit.Limiter) (ok, tooMany int, br *breaker.Breaker) {
				prov := &provider{style: style, quota: 3, window: 400 * time.Millisecond}
				srv := httptest.NewServer(prov)
				defer srv.Close()
				c, br := client(t, lim)
				for range 7 {
					if code := post(t, c, srv.URL+"/v1/chat/completions"); code != 200 {
						t.Errorf("status %d", code)
					}
				}
				ok, tooMany = prov.counts()
				return ok, tooMany, br
			}
			ok, tooMany, br := run(newRateLimiter(t, ratelimit.Config{}))
			if ok != 7 || tooMany != 0 {
				t.Errorf("with the limiter: %d ok, %d 429s at the provider, want 7 and 0", ok, tooMany)
			}
			if br.State() != breaker.Closed {
				t.Errorf("breaker %v", br.State())
			}
			// Without it, the same calls draw 429s (retried after their
			// Retry-After), and the breaker sees none of them as failures.
			ok, tooMany, br = run(nil)
			if ok != 7 || tooMany == 0 {
				t.Errorf("without the limiter: %d ok, %d 429s, want 7 and some", ok, tooMany)
			}
			if br.State() != breaker.Closed {
				t.Errorf("breaker %v after 429s", br.State())
			}
		})
	}
}

// Observe is called for every response, 200s included; a 429 on an
// attempt that is then retried sets the hold before the retry decides.
func TestTransportFeedsSignals(t *testing.T) {
	var mu sync.Mutex
	var codes []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := len(codes)
		mu.Unlock()
		if n == 0 {
			w.Header().Set("Retry-After-Ms", "50")
			w.WriteHeader(429)
			return
		}
		w.Header().Set("x-ratelimit-remaining-requests", "0")
		w.Header().Set("x-ratelimit-reset-requests", "2s")
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	rec := signalFunc(func(r *http.Response) {
		mu.Lock()
		codes = append(codes, r.StatusCode)
		mu.Unlock()
	})
	lim := newRateLimiter(t, ratelimit.Config{})
	rt := mustOK[*retry.Retry](t)(retry.New(retry.Config{InitialInterval: time.Millisecond}))
	tr := &httppolicy.Transport{Base: &http.Transport{}, Signals: both{rec, httppolicy.LimiterSignals(lim)},
		Policy: mustOK[*compose.Pipeline](t)(compose.New("x", compose.Policies{Retry: rt, RateLimit: lim}))}
	defer tr.CloseIdleConnections()
	start := time.Now()
	if code := post(t, &http.Client{Transport: tr}, srv.URL); code != 200 {
		t.Fatalf("status %d", code)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("the retry came after %v, before the 429's 50ms", d)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(codes) != 2 || codes[0] != 429 || codes[1] != 200 {
		t.Errorf("observed %v, want [429 200]", codes)
	}
	if h := lim.Held(); h <= 0 || h > 2*time.Second {
		t.Errorf("Held = %v after a 200 with remaining 0", h)
	}
}

// The cost a call declares with WithCost reaches Observe through the
// Transport (on the response's request): a 200 whose tokens bucket is short
// of it holds the next calls for its refill; a cheaper call's does not.
func TestTransportPassesTheCost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-ratelimit-limit-tokens", "60000")
		w.Header().Set("x-ratelimit-remaining-tokens", "400")
		w.Header().Set("x-ratelimit-reset-tokens", "5.96s")
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	for _, tc := range []struct {
		cost int
		held bool
	}{{0, false}, {300, false}, {1000, true}} {
		lim := newRateLimiter(t, ratelimit.Config{})
		tr := &httppolicy.Transport{Base: &http.Transport{}, Signals: httppolicy.LimiterSignals(lim),
			Policy: mustOK[*compose.Pipeline](t)(compose.New("x", compose.Policies{RateLimit: lim}))}
		ctx := ratelimit.WithCost(context.Background(), tc.cost)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		res, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		tr.CloseIdleConnections()
		if h := lim.Held(); (h > 0) != tc.held || h > 60*time.Millisecond {
			t.Errorf("cost %d, 400 tokens left: Held = %v, want held %v (at most 60ms)", tc.cost, h, tc.held)
		}
	}
}

type signalFunc func(*http.Response)

func (f signalFunc) Observe(r *http.Response) { f(r) }

type both [2]httppolicy.Signals

func (b both) Observe(r *http.Response) { b[0].Observe(r); b[1].Observe(r) }

func newRateLimiter(t *testing.T, cfg ratelimit.Config) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustOK[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

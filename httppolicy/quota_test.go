package httppolicy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/hedge"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
)

const (
	openAIQuota  = `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
	openAIRate   = `{"error":{"message":"Rate limit reached.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	anthropicPay = `{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low."}}`
)

// answers is a base that answers every request with status and body, and
// counts the requests.
type answers struct {
	status int
	body   string
	n      atomic.Int32
}

func (a *answers) RoundTrip(req *http.Request) (*http.Response, error) {
	a.n.Add(1)
	h := http.Header{"Content-Type": {"application/json"}, "Retry-After": {"1"},
		"X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Reset-Requests": {"20s"}}
	return &http.Response{StatusCode: a.status, Header: h, Request: req,
		Body: readCloser{strings.NewReader(a.body)}, ContentLength: int64(len(a.body))}, nil
}

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }

// providerTransport runs Retry -> RateLimit -> Breaker, with the limiter
// fed from the answers' headers.
func providerTransport(t *testing.T, base http.RoundTripper) (*httppolicy.Transport, *ratelimit.Limiter, *breaker.Breaker) {
	t.Helper()
	rt := mustOK[*retry.Retry](t)(retry.New(retry.Config{MaxAttempts: 3, InitialInterval: time.Millisecond, Jitter: -1}))
	br := mustOK[*breaker.Breaker](t)(breaker.New(breaker.Config{ConsecutiveFailures: 1, OpenTimeout: time.Hour}))
	t.Cleanup(func() { br.Close() })
	lim := newRateLimiter(t, ratelimit.Config{Name: "llm", MaxHold: time.Minute})
	pl := mustOK[*compose.Pipeline](t)(compose.New("llm", compose.Policies{Retry: rt, RateLimit: lim, Breaker: br}))
	return &httppolicy.Transport{Base: base, Policy: pl, Signals: httppolicy.LimiterSignals(lim)}, lim, br
}

// A spent quota (OpenAI's insufficient_quota 429, a 402, Anthropic's
// billing_error) comes back at once: one request, no retry, no rate-limit
// hold, not a breaker failure, the policies seeing policy.ErrQuotaSpent,
// and X-Should-Retry: false for an SDK's own retries.
func TestSpentQuotaComesBackAtOnce(t *testing.T) {
	for _, tt := range []struct {
		name   string
		status int
		body   string
	}{
		{"openai insufficient_quota", 429, openAIQuota},
		{"402", 402, `{}`},
		{"402 without a body", 402, ``},
		{"anthropic billing_error", 429, anthropicPay},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base := &answers{status: tt.status, body: tt.body}
			tr, lim, br := providerTransport(t, base)
			req, _ := http.NewRequest(http.MethodPost, "http://llm.test/v1/chat/completions", strings.NewReader(`{}`))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(`{}`)), nil }
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || body != tt.body || resp.Header.Get("X-Should-Retry") != "false" {
				t.Fatalf("got %d %q, X-Should-Retry %q; want %d %q, false", resp.StatusCode, body, resp.Header.Get("X-Should-Retry"), tt.status, tt.body)
			}
			if n := base.n.Load(); n != 1 {
				t.Fatalf("%d requests, want 1", n)
			}
			if h := lim.Held(); h != 0 {
				t.Fatalf("rate-limit hold of %v, want none", h)
			}
			if c := br.Counts(); br.State() != breaker.Closed || c.TotalFailures != 0 || c.TotalSuccesses != 0 || c.TotalExclusions != 1 {
				t.Fatalf("breaker %v, counts %+v; want closed, one exclusion", br.State(), c)
			}
		})
	}
}

// The class a spent quota's policies see: ErrQuotaSpent, not throttled.
func TestSpentQuotaError(t *testing.T) {
	var got error
	tr := &httppolicy.Transport{Base: &answers{status: 429, body: openAIQuota},
		Policy: execPolicy(func(ctx context.Context, fn policy.Func) error { got = fn(ctx); return got })}
	req, _ := http.NewRequest(http.MethodGet, "http://llm.test/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !errors.Is(got, policy.ErrQuotaSpent) || errors.Is(got, policy.ErrThrottled) || !policy.IsPermanent(got) {
		t.Fatalf("the policy saw %v; want a permanent error matching ErrQuotaSpent only", got)
	}
}

// A 429 whose body is no spent quota (a rate limit, malformed JSON, a body
// over MaxFailureBody) stays throttled: it is retried after its
// Retry-After, and holds.
func TestThrottledIsNotSpent(t *testing.T) {
	huge := `{"error":{"code":"insufficient_quota","pad":"` + strings.Repeat("x", httppolicy.MaxFailureBody) + `"}}`
	for _, tt := range []struct{ name, body string }{
		{"rate limit", openAIRate},
		{"malformed", `{"error":{"code":"insufficient_quota"`},
		{"not an object", `["insufficient_quota"]`},
		{"code not a string", `{"error":{"code":{"x":"insufficient_quota"}}}`},
		{"over MaxFailureBody", huge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got error
			tr := &httppolicy.Transport{Base: &answers{status: 429, body: tt.body},
				Policy: execPolicy(func(ctx context.Context, fn policy.Func) error { got = fn(ctx); return got })}
			req, _ := http.NewRequest(http.MethodGet, "http://llm.test/", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if !errors.Is(got, policy.ErrThrottled) || errors.Is(got, policy.ErrQuotaSpent) || resp.Header.Get("X-Should-Retry") != "" {
				t.Fatalf("the policy saw %v, X-Should-Retry %q; want throttled", got, resp.Header.Get("X-Should-Retry"))
			}
		})
	}
}

// Anthropic's 529 (overloaded) is a transient failure: retried, even for a
// request that is not idempotent.
func TestOverloadedIsRetried(t *testing.T) {
	base := &answers{status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}
	rt := mustOK[*retry.Retry](t)(retry.New(retry.Config{MaxAttempts: 3, InitialInterval: time.Millisecond, Jitter: -1}))
	tr := &httppolicy.Transport{Base: base, Policy: rt}
	req, _ := http.NewRequest(http.MethodPost, "http://llm.test/v1/messages", strings.NewReader(`{}`))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(`{}`)), nil }
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := base.n.Load(); resp.StatusCode != 529 || n < 2 {
		t.Fatalf("status %d after %d requests; want 529 after a retry", resp.StatusCode, n)
	}
}

type execPolicy func(context.Context, policy.Func) error

func (f execPolicy) Execute(ctx context.Context, fn policy.Func) error { return f(ctx, fn) }

// Hedging sends no hedge after a spent quota, over a Transport or a raw
// base: the first answer comes back.
func TestHedgingStopsOnSpentQuota(t *testing.T) {
	for _, overTransport := range []bool{false, true} {
		base := &answers{status: 429, body: openAIQuota}
		h, err := hedge.New(hedge.Config{Delay: time.Hour, MaxHedges: 2})
		if err != nil {
			t.Fatal(err)
		}
		var rt http.RoundTripper = base
		if overTransport {
			rt = &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{})}
		}
		hr := &httppolicy.Hedging{Base: rt, Hedge: h}
		req, _ := http.NewRequest(http.MethodGet, "http://llm.test/v1/models", nil)
		resp, err := hr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if n := base.n.Load(); n != 1 || resp.StatusCode != 429 || resp.Header.Get("X-Should-Retry") != "false" {
			t.Fatalf("over a Transport %v: %d requests, status %d, X-Should-Retry %q; want 1, 429, false",
				overTransport, n, resp.StatusCode, resp.Header.Get("X-Should-Retry"))
		}
	}
}

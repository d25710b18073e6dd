package watertight_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
)

func TestRateLimitSection(t *testing.T) {
	// MaxWait defaults to the Retry section's MaxInterval.
	p := mustNew(t, "llm", watertight.Config{
		Retry:     &retry.Config{MaxInterval: 5 * time.Second},
		RateLimit: &ratelimit.Config{},
	})
	if p.RateLimit() == nil || p.RateLimit().MaxWait() != 5*time.Second {
		t.Fatalf("RateLimit() = %v; want one with MaxWait 5s", p.RateLimit())
	}
	for _, tt := range []struct {
		cfg  watertight.Config
		want time.Duration
	}{
		{watertight.Config{Retry: &retry.Config{}, RateLimit: &ratelimit.Config{}}, 10 * time.Second},
		{watertight.Config{RateLimit: &ratelimit.Config{}}, ratelimit.DefaultMaxHold},
		{watertight.Config{Retry: &retry.Config{}, RateLimit: &ratelimit.Config{MaxWait: time.Second}}, time.Second},
	} {
		if got := mustNew(t, "x", tt.cfg).RateLimit().MaxWait(); got != tt.want {
			t.Errorf("MaxWait = %v, want %v", got, tt.want)
		}
	}
	// The section's name defaults to the pipeline's.
	p.RateLimit().HoldFor(time.Minute)
	err := p.Execute(context.Background(), ok)
	if !errors.Is(err, ratelimit.ErrLimited) || err.Error() != `ratelimit "llm" rejected the call: throttled` {
		t.Errorf("Execute during a hold: %v", err)
	}
	if _, err := watertight.New("x", watertight.Config{RateLimit: &ratelimit.Config{MaxHold: -1}}); err == nil ||
		err.Error() != "watertight: RateLimit: Config.MaxHold must be >= 0, got -1ns" {
		t.Errorf("invalid section: %v", err)
	}
	l, _ := ratelimit.New(ratelimit.Config{})
	if _, err := watertight.New("x", watertight.Config{RateLimit: &ratelimit.Config{}, Use: compose.Policies{RateLimit: l}}); err == nil ||
		!strings.Contains(err.Error(), "RateLimit: both RateLimit and Use.RateLimit set") {
		t.Errorf("both set: %v", err)
	}
	if got := mustNew(t, "x", watertight.Config{Use: compose.Policies{RateLimit: l}}).RateLimit(); got != l {
		t.Errorf("RateLimit() = %v, want the one in Use", got)
	}
	if mustNew(t, "x", watertight.Config{}).RateLimit() != nil {
		t.Error("RateLimit() without a RateLimit slot")
	}
}

// NewHTTPClient feeds the pipeline's Limiter from every response: a 200
// saying the request quota is spent holds the next call, which (its
// deadline too near) is rejected without a request; a 429 whose
// Retry-After passes the retry's MaxInterval ends after one request, as the
// retry's exhaustion, and the client gets that 429; the breaker counts none
// of it.
func TestHTTPClientFeedsRateLimit(t *testing.T) {
	var hits atomic.Int32
	var mode atomic.Int32 // 0: 200 with remaining 0; 1: 429
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if mode.Load() == 0 {
			w.Header().Set("x-ratelimit-remaining-requests", "0")
			w.Header().Set("x-ratelimit-reset-requests", "30s")
			io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	c, err := watertight.NewHTTPClient("llm", watertight.Config{
		Retry:     &retry.Config{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: 5 * time.Second},
		RateLimit: &ratelimit.Config{},
		Breaker:   &breaker.Config{ConsecutiveFailures: 1},
	}, watertight.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if tr := c.Client.Transport.(*httppolicy.Transport); tr.Signals != httppolicy.LimiterSignals(c.Pipeline.RateLimit()) {
		t.Fatalf("Signals = %v, want the pipeline's Limiter", tr.Signals)
	}
	get := func(ctx context.Context) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		res, err := c.Do(req)
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return res, err
	}
	if res, err := get(context.Background()); err != nil || res.StatusCode != 200 {
		t.Fatalf("first call: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = get(ctx)
	var re *policy.RejectedError
	if !errors.As(err, &re) || re.Kind != "ratelimit" || re.Reason != ratelimit.ReasonThrottled || hits.Load() != 1 {
		t.Fatalf("second call: %v after %d requests; want a throttled rejection and no request", err, hits.Load())
	}

	// A fresh client for the 429 case (the first's hold lasts 30 s).
	c2, err := watertight.NewHTTPClient("llm", watertight.Config{
		Retry:     &retry.Config{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: 5 * time.Second},
		RateLimit: &ratelimit.Config{},
		Breaker:   &breaker.Config{ConsecutiveFailures: 1},
	}, watertight.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c = c2
	mode.Store(1)
	hits.Store(0)
	res, err := get(context.Background())
	if err != nil || res.StatusCode != http.StatusTooManyRequests || hits.Load() != 1 {
		t.Fatalf("429: %v, %v after %d requests; want the 429 itself after one", res, err, hits.Load())
	}
	if st := c2.Pipeline.Breaker().State(); st != breaker.Closed {
		t.Errorf("breaker %v after a 429", st)
	}
	if h := c2.Pipeline.RateLimit().Held(); h < 25*time.Second {
		t.Errorf("Held = %v after Retry-After 30", h)
	}
}

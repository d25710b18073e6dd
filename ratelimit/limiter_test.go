package ratelimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
)

func newLimiter(t *testing.T, cfg ratelimit.Config) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func resp(status int, kv ...string) *http.Response {
	return &http.Response{StatusCode: status, Header: hdr(kv...)}
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// observe feeds l one response, as an httppolicy.Transport does.
func observe(l *ratelimit.Limiter, r *http.Response) {
	httppolicy.LimiterSignals(l).Observe(r)
}

func ok(context.Context) error { return nil }

func TestNewNamesTheField(t *testing.T) {
	for _, tt := range []struct {
		cfg   ratelimit.Config
		field string
	}{
		{ratelimit.Config{RequestsPerSecond: -1}, "Config.RequestsPerSecond"},
		{ratelimit.Config{RequestsPerSecond: nan()}, "Config.RequestsPerSecond"},
		{ratelimit.Config{Burst: -1}, "Config.Burst"},
		{ratelimit.Config{TokensPerMinute: -2}, "Config.TokensPerMinute"},
		{ratelimit.Config{TokenBurst: -1}, "Config.TokenBurst"},
		{ratelimit.Config{MaxHold: -1}, "Config.MaxHold"},
		{ratelimit.Config{MaxWait: -1}, "Config.MaxWait"},
	} {
		_, err := ratelimit.New(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.field) || !strings.HasPrefix(err.Error(), "ratelimit: ") {
			t.Errorf("New(%+v) = %v, want an error naming %s", tt.cfg, err, tt.field)
		}
	}
}

func nan() float64 { z := 0.0; return z / z }

// The zero Config admits at once and reads no hold.
func TestNoHoldAdmitsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		start := time.Now()
		for range 3 {
			if err := l.Execute(context.Background(), ok); err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("admission took %v", d)
		}
		observe(l, resp(200, "x-ratelimit-remaining-requests", "4", "x-ratelimit-reset-requests", "1s"))
		observe(l, nil)
		if err := l.Execute(context.Background(), ok); err != nil || time.Since(start) != 0 {
			t.Errorf("quota left held the call: %v after %v", err, time.Since(start))
		}
	})
}

// A spent quota on a 200 that names no limit holds every attempt until its
// reset: the one time the bucket is sure to have room.
func TestRemainingZeroHoldsUntilReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		observe(l, resp(200, "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1.5s"))
		if h := l.Held(); h != 1500*time.Millisecond {
			t.Errorf("Held = %v", h)
		}
		start := time.Now()
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				if err := l.Execute(context.Background(), func(context.Context) error {
					if d := time.Since(start); d != 1500*time.Millisecond {
						t.Errorf("ran after %v, want 1.5s", d)
					}
					return nil
				}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if h := l.Held(); h != 0 {
			t.Errorf("Held after the reset = %v", h)
		}
	})
}

// A spent bucket that names its limit refills continuously: the reset is
// when it is full again, and one request frees after reset/limit, so the
// attempts are held that long, not until the reset.
func TestSpentBucketHoldsOneRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6s"))
		if h := l.Held(); h != 100*time.Millisecond {
			t.Errorf("Held = %v, want 100ms (6s / 60)", h)
		}
		start := time.Now()
		if err := l.Execute(context.Background(), ok); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Errorf("held %v, want 100ms", d)
		}
	})
}

// Observe reads the cost the call declared (WithCost) from the response's
// request: a tokens bucket with fewer left than that is short, and holds
// until that many have refilled; without a declared cost, it is not.
func TestObserveReadsTheCallsCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := []string{"x-ratelimit-limit-tokens", "60000", "x-ratelimit-remaining-tokens", "400", "x-ratelimit-reset-tokens", "5.96s"}
		l := newLimiter(t, ratelimit.Config{})
		r := resp(200, kv...)
		r.Request = httptest.NewRequestWithContext(ratelimit.WithCost(context.Background(), 1000), "POST", "/", nil)
		observe(l, r)
		if h := l.Held(); h != 60*time.Millisecond {
			t.Errorf("cost 1000, 400 left: Held = %v, want 60ms (600 tokens at 10/ms)", h)
		}
		l = newLimiter(t, ratelimit.Config{})
		r.Request = httptest.NewRequestWithContext(context.Background(), "POST", "/", nil)
		observe(l, r)
		if h := l.Held(); h != 0 {
			t.Errorf("no cost declared: Held = %v, want 0", h)
		}
	})
}

// A 429's Retry-After and the spent kind's reset: the later wins.
func TestHoldIsTheLatestSignal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		observe(l, resp(429, "Retry-After", "2"))
		observe(l, resp(200, "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1s")) // shorter: no effect
		start := time.Now()
		if err := l.Execute(context.Background(), ok); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("held %v, want 2s", d)
		}
	})
}

// MaxHold caps a signal; MaxWait (default MaxHold) bounds the wait.
func TestMaxHoldCaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{MaxHold: 3 * time.Second})
		observe(l, resp(429, "Retry-After", "3600"))
		if h := l.Held(); h != 3*time.Second {
			t.Errorf("Held = %v, want MaxHold 3s", h)
		}
		start := time.Now()
		if err := l.Execute(context.Background(), ok); err != nil || time.Since(start) != 3*time.Second {
			t.Errorf("Execute = %v after %v", err, time.Since(start))
		}
	})
}

func checkRejection(t *testing.T, err error, reason string) {
	t.Helper()
	var re *policy.RejectedError
	if !errors.Is(err, policy.ErrRejected) || !errors.Is(err, ratelimit.ErrLimited) || !errors.As(err, &re) {
		t.Fatalf("err = %v, want a ratelimit rejection", err)
	}
	if re.Kind != "ratelimit" || re.Reason != reason {
		t.Errorf("rejection %+v, want kind ratelimit, reason %s", re, reason)
	}
}

// A hold that cannot end before the attempt's deadline rejects it at once,
// without sleeping into the deadline.
func TestHoldPastDeadlineRejects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hooked atomic.Int32
		l := newLimiter(t, ratelimit.Config{Name: "llm", OnReject: func(ctx context.Context, err *policy.RejectedError) {
			hooked.Add(1)
		}})
		observe(l, resp(429, "Retry-After", "5"))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		err := l.Execute(ctx, func(context.Context) error { t.Error("fn ran"); return nil })
		checkRejection(t, err, ratelimit.ReasonThrottled)
		if d := time.Since(start); d != 0 {
			t.Errorf("rejected after %v, want at once", d)
		}
		if hooked.Load() != 1 {
			t.Errorf("OnReject called %d times", hooked.Load())
		}
		if got := err.Error(); got != `ratelimit "llm" rejected the call: throttled` {
			t.Errorf("message %q", got)
		}
		// One that fits waits.
		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		if err := l.Execute(ctx2, ok); err != nil || time.Since(start) != 5*time.Second {
			t.Errorf("Execute = %v after %v", err, time.Since(start))
		}
	})
}

func TestHoldPastMaxWaitRejects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{MaxWait: time.Second})
		observe(l, resp(503, "Retry-After", "2"))
		checkRejection(t, l.Execute(context.Background(), ok), ratelimit.ReasonThrottled)
		time.Sleep(time.Second + time.Millisecond)
		start := time.Now()
		if err := l.Execute(context.Background(), ok); err != nil || time.Since(start) != time.Second-time.Millisecond {
			t.Errorf("Execute = %v after %v", err, time.Since(start))
		}
	})
}

// A 429 that arrives while attempts wait moves the hold on: they wait
// longer if it fits, and are rejected if it does not.
func TestHoldExtendedDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		observe(l, resp(429, "Retry-After", "1"))
		start := time.Now()
		short, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		errs := make(chan error, 2)
		go func() { errs <- l.Execute(context.Background(), ok) }()
		go func() { errs <- l.Execute(short, ok) }()
		time.Sleep(500 * time.Millisecond)
		observe(l, resp(429, "Retry-After", "3")) // until 3.5s
		var rejected, admitted int
		for range 2 {
			if err := <-errs; err == nil {
				admitted++
				if d := time.Since(start); d != 3500*time.Millisecond {
					t.Errorf("admitted after %v, want 3.5s", d)
				}
			} else {
				checkRejection(t, err, ratelimit.ReasonThrottled)
				rejected++
			}
		}
		if rejected != 1 || admitted != 1 {
			t.Errorf("%d rejected, %d admitted", rejected, admitted)
		}
	})
}

// A caller that gives up while held leaves no waiter behind and fn never
// runs.
func TestCancelDuringHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		observe(l, resp(429, "Retry-After", "10"))
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- l.Execute(ctx, func(context.Context) error { t.Error("fn ran"); return nil }) }()
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) || errors.Is(err, policy.ErrRejected) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	})
}

// The client-side request rate spaces attempts; a wait past the deadline
// is a rejection with reason rate that gives its reservation back.
func TestRequestsPerSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{RequestsPerSecond: 10, Burst: 1})
		start := time.Now()
		for range 5 {
			if err := l.Execute(context.Background(), ok); err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d != 400*time.Millisecond {
			t.Errorf("5 calls at 10/s burst 1 took %v, want 400ms", d)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		checkRejection(t, l.Execute(ctx, ok), ratelimit.ReasonRate)
		// The refused reservation was given back: the next call waits
		// 100ms from the last admission, not 200ms.
		before := time.Now()
		if err := l.Execute(context.Background(), ok); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(before); d != 100*time.Millisecond {
			t.Errorf("next call waited %v, want 100ms", d)
		}
	})
}

// TokensPerMinute charges each call its declared cost.
func TestTokensPerMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{TokensPerMinute: 6000}) // 100 tokens/s, burst 6000
		ctx := ratelimit.WithCost(context.Background(), 5000)
		start := time.Now()
		if err := l.Execute(ctx, ok); err != nil || time.Since(start) != 0 {
			t.Fatalf("first call: %v after %v", err, time.Since(start))
		}
		// 1000 left: 5000 more need 4000 tokens more, 40 s.
		if err := l.Execute(ctx, ok); err != nil || time.Since(start) != 40*time.Second {
			t.Errorf("second call: %v after %v, want 40s", err, time.Since(start))
		}
		if got := ratelimit.Cost(ctx); got != 5000 {
			t.Errorf("Cost = %d", got)
		}
		// A cost above the burst draws the burst; no cost still admits.
		if err := l.Execute(ratelimit.WithCost(context.Background(), 1<<40), ok); err != nil {
			t.Errorf("huge cost: %v", err)
		}
		if err := l.Execute(context.Background(), ok); err != nil {
			t.Errorf("no cost: %v", err)
		}
	})
}

func TestWithCostPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic on a negative cost")
		}
	}()
	ratelimit.WithCost(context.Background(), -1)
}

// A throttled error with a Retry-After feeds the hold, and comes back with
// its RetryAfter taken off, errors.Is and errors.As seeing through it.
func TestThrottledErrorFeedsTheHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		se := &httppolicy.StatusError{StatusCode: 429, RetryAfterDelay: 2 * time.Second}
		err := l.Execute(context.Background(), func(context.Context) error { return se })
		var got *httppolicy.StatusError
		if !errors.As(err, &got) || got != se || !errors.Is(err, policy.ErrThrottled) || err.Error() != se.Error() {
			t.Fatalf("err = %v, want the StatusError seen through", err)
		}
		var ra interface{ RetryAfter() time.Duration }
		if !errors.As(err, &ra) || ra.RetryAfter() != 0 {
			t.Errorf("the outermost RetryAfter is %v, want 0", ra.RetryAfter())
		}
		if h := l.Held(); h != 2*time.Second {
			t.Errorf("Held = %v", h)
		}
		// A 503 is left alone (not throttled), and so is a 429 without a wait.
		e503 := &httppolicy.StatusError{StatusCode: 503, RetryAfterDelay: time.Second}
		if err := l.Execute(context.Background(), func(context.Context) error { return e503 }); err != e503 {
			t.Errorf("503 came back as %v", err)
		}
		bare := &httppolicy.StatusError{StatusCode: 429}
		if err := l.Execute(context.Background(), func(context.Context) error { return bare }); err != bare {
			t.Errorf("bare 429 came back as %v", err)
		}
	})
}

func TestHoldForIgnoresAbsurd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		l.HoldFor(-time.Second)
		l.HoldFor(48 * time.Hour)
		if h := l.Held(); h != 0 {
			t.Errorf("Held = %v after absurd holds", h)
		}
		l.HoldFor(time.Second)
		if h := l.Held(); h != time.Second {
			t.Errorf("Held = %v", h)
		}
	})
}

func TestNilPanics(t *testing.T) {
	l := newLimiter(t, ratelimit.Config{})
	for name, call := range map[string]func(){
		"nil ctx": func() { l.Execute(nil, ok) }, //nolint:staticcheck // the point
		"nil fn":  func() { l.Execute(context.Background(), nil) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(r.(string), "ratelimit: ") {
					t.Errorf("%s: recover() = %v", name, r)
				}
			}()
			call()
		}()
	}
}

// Observe holds on a 200 for a spent count of each kind it reads, and on a
// 429 or 503 whatever the counts say.
func TestObserveEveryKind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reset := time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339)
		for _, kv := range [][]string{
			{"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "3s"},
			{"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "3s"},
			{"anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", reset},
			{"anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", reset},
			{"anthropic-ratelimit-input-tokens-remaining", "0", "anthropic-ratelimit-input-tokens-reset", reset},
			{"anthropic-ratelimit-output-tokens-remaining", "0", "anthropic-ratelimit-output-tokens-reset", reset},
		} {
			l := newLimiter(t, ratelimit.Config{})
			observe(l, resp(200, kv...))
			if h := l.Held(); h != 3*time.Second {
				t.Errorf("%s: Held = %v, want 3s", kv[0], h)
			}
			kv[1] = "1"
			l = newLimiter(t, ratelimit.Config{})
			observe(l, resp(200, kv...))
			if h := l.Held(); h != 0 {
				t.Errorf("%s: 1: Held = %v, want 0", kv[0], h)
			}
			observe(l, resp(429, kv...))
			if h := l.Held(); h != 3*time.Second {
				t.Errorf("%s: 429: Held = %v, want 3s (the earliest reset)", kv[0], h)
			}
		}
	})
}

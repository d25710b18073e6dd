package httppolicy_test

import (
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/ratelimit"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestRateLimitHold(t *testing.T) {
	rfc := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339Nano) }
	tests := []struct {
		name   string
		status int
		h      http.Header
		want   time.Duration
		cost   int
	}{
		{"200 without headers", 200, nil, 0, 0},
		{"429 Retry-After seconds", 429, hdr("Retry-After", "3"), 3 * time.Second, 0},
		{"429 Retry-After-Ms first", 429, hdr("Retry-After", "3", "Retry-After-Ms", "1500"), 1500 * time.Millisecond, 0},
		{"503 Retry-After", 503, hdr("Retry-After", "2"), 2 * time.Second, 0},
		{"500 Retry-After ignored", 500, hdr("Retry-After", "2"), 0, 0},
		{"200 Retry-After ignored", 200, hdr("Retry-After", "2"), 0, 0},
		{"429 Retry-After absurd ignored", 429, hdr("Retry-After", "999999999"), 0, 0},
		{"openai requests spent on a 200", 200, hdr(
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s",
			"x-ratelimit-remaining-tokens", "100", "x-ratelimit-reset-tokens", "6m0s"), time.Second, 0},
		{"openai tokens spent", 200, hdr(
			"x-ratelimit-remaining-requests", "59", "x-ratelimit-reset-requests", "1s",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1m30.5s"), 90*time.Second + 500*time.Millisecond, 0},
		{"openai both spent: the later", 200, hdr(
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "20ms",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "6m0s"), 6 * time.Minute, 0},
		{"openai quota left", 200, hdr(
			"x-ratelimit-remaining-requests", "3", "x-ratelimit-reset-requests", "20ms"), 0, 0},
		{"429: max of Retry-After and spent reset", 429, hdr("Retry-After", "1",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "4s"), 4 * time.Second, 0},
		{"429 without Retry-After, nothing short, no limits: the latest reset", 429, hdr(
			"x-ratelimit-remaining-requests", "5", "x-ratelimit-reset-requests", "2s",
			"x-ratelimit-remaining-tokens", "9", "x-ratelimit-reset-tokens", "700ms"), 2 * time.Second, 0},
		{"429 without Retry-After, nothing short: one more of each bucket", 429, hdr(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "5", "x-ratelimit-reset-requests", "5.5s",
			"x-ratelimit-limit-tokens", "60000", "x-ratelimit-remaining-tokens", "9000", "x-ratelimit-reset-tokens", "5.1s"), 100 * time.Millisecond, 0},
		{"429 without Retry-After, no count: one of the bucket", 429, hdr(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-reset-requests", "6s"), 100 * time.Millisecond, 0},
		{"429 with Retry-After: no bucket taken for short", 429, hdr("Retry-After-Ms", "20",
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "5", "x-ratelimit-reset-requests", "5.5s"), 20 * time.Millisecond, 0},
		{"200 without a count: no hold", 200, hdr(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-reset-requests", "6s"), 0, 0},
		{"anthropic requests spent", 200, hdr(
			"anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", rfc(5*time.Second)), 5 * time.Second, 0},
		{"anthropic output tokens spent", 200, hdr(
			"anthropic-ratelimit-requests-remaining", "10", "anthropic-ratelimit-requests-reset", rfc(time.Second),
			"anthropic-ratelimit-output-tokens-remaining", "0", "anthropic-ratelimit-output-tokens-reset", rfc(12*time.Second)), 12 * time.Second, 0},
		{"anthropic input tokens spent", 200, hdr(
			"anthropic-ratelimit-input-tokens-remaining", "0", "anthropic-ratelimit-input-tokens-reset", rfc(1500*time.Millisecond)), 1500 * time.Millisecond, 0},
		{"anthropic tokens spent", 200, hdr(
			"anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", rfc(3*time.Second)), 3 * time.Second, 0},
		{"anthropic 429 with retry-after", 429, hdr("retry-after", "7",
			"anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", rfc(3*time.Second)), 7 * time.Second, 0},
		{"anthropic reset in the past ignored", 200, hdr(
			"anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", rfc(-time.Second)), 0, 0},
		{"anthropic reset two days away ignored", 200, hdr(
			"anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", rfc(48*time.Hour)), 0, 0},
		{"malformed remaining ignored", 200, hdr(
			"x-ratelimit-remaining-requests", "-0", "x-ratelimit-reset-requests", "1s"), 0, 0},
		{"unit-less reset ignored", 200, hdr(
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1"), 0, 0},
		{"negative reset ignored", 200, hdr(
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "-1s"), 0, 0},
		{"absurd reset ignored", 200, hdr(
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "9999h"), 0, 0},
		{"garbage reset ignored", 200, hdr(
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "soon"), 0, 0},
		{"date where a duration goes ignored", 200, hdr(
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", rfc(time.Second)), 0, 0},
		{"spaces trimmed", 200, hdr(
			"x-ratelimit-remaining-requests", " 0 ", "x-ratelimit-reset-requests", "\t2s "), 2 * time.Second, 0},
		// Continuous refill: the reset is when the bucket is full again.
		{"openai requests spent: one request's refill, reset/limit", 200, hdr(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6s"), 100 * time.Millisecond, 0},
		{"openai requests spent, a minute's quota", 200, hdr(
			"x-ratelimit-limit-requests", "500", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1m0s"), 120 * time.Millisecond, 0},
		{"openai tokens short of the declared cost", 200, hdr(
			"x-ratelimit-limit-tokens", "60000", "x-ratelimit-remaining-tokens", "400", "x-ratelimit-reset-tokens", "5.96s"), 60 * time.Millisecond, 1000},
		{"openai tokens enough for the declared cost", 200, hdr(
			"x-ratelimit-limit-tokens", "60000", "x-ratelimit-remaining-tokens", "1000", "x-ratelimit-reset-tokens", "5.9s"), 0, 1000},
		{"openai tokens left without a declared cost", 200, hdr(
			"x-ratelimit-limit-tokens", "60000", "x-ratelimit-remaining-tokens", "400", "x-ratelimit-reset-tokens", "5.96s"), 0, 0},
		{"openai tokens spent, no cost: one token's refill", 200, hdr(
			"x-ratelimit-limit-tokens", "60000", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "6s"), 100 * time.Microsecond, 0},
		{"a cost above the limit: until the reset", 200, hdr(
			"x-ratelimit-limit-tokens", "1000", "x-ratelimit-remaining-tokens", "10", "x-ratelimit-reset-tokens", "6s"), 6 * time.Second, 5000},
		{"a limit not above the remaining count: until the reset", 200, hdr(
			"x-ratelimit-limit-requests", "0", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6s"), 6 * time.Second, 0},
		{"a malformed limit: until the reset", 200, hdr(
			"x-ratelimit-limit-requests", "sixty", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6s"), 6 * time.Second, 0},
		{"a huge limit", 200, hdr(
			"x-ratelimit-limit-requests", "9223372036854775807", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "24h0m0s"), time.Nanosecond, 0},
		{"the cost is not asked of the requests bucket", 200, hdr(
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "1", "x-ratelimit-reset-requests", "5.9s"), 0, 1000},
		{"anthropic requests spent: reset/limit", 200, hdr(
			"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", rfc(5*time.Second)), 100 * time.Millisecond, 0},
		{"anthropic tokens short of the declared cost", 200, hdr(
			"anthropic-ratelimit-tokens-limit", "80000", "anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", rfc(60*time.Second)), 1500 * time.Millisecond, 2000},
		{"anthropic input tokens take 1, not the cost", 200, hdr(
			"anthropic-ratelimit-input-tokens-limit", "40000", "anthropic-ratelimit-input-tokens-remaining", "10", "anthropic-ratelimit-input-tokens-reset", rfc(60*time.Second)), 0, 2000},
		{"429 with Retry-After shorter than the refill", 429, hdr("Retry-After-Ms", "20",
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6s"), 100 * time.Millisecond, 0},
		{"429 with Retry-After longer than the refill", 429, hdr("Retry-After", "1",
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6s"), time.Second, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httppolicy.RateLimitHold(tt.status, tt.h, t0, tt.cost); got != tt.want {
				t.Errorf("RateLimitHold = %v, want %v", got, tt.want)
			}
		})
	}
}

// An Anthropic reset is a time on the server's clock: it is read against
// the response's Date header, so a server clock ahead or behind ours does
// not lengthen or shorten the hold (a spent bucket of 50, full in 60 s,
// holds 1.2 s), nor drop it (61 s behind, the reset was in our past). A
// response without a valid Date is read against our clock.
func TestRateLimitHoldReadsAnthropicResetsOnTheServersClock(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	h := func(server time.Time, date string) http.Header {
		h := hdr("anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "0",
			"anthropic-ratelimit-requests-reset", server.Add(time.Minute).Format(time.RFC3339))
		if date != "" {
			h.Set("Date", date)
		}
		return h
	}
	for _, skew := range []time.Duration{0, 30 * time.Second, -30 * time.Second, -61 * time.Second} {
		server := now.Add(skew)
		if got := httppolicy.RateLimitHold(200, h(server, server.Format(http.TimeFormat)), now, 1); got != 1200*time.Millisecond {
			t.Errorf("server clock %v from ours: Hold = %v, want 1.2s", skew, got)
		}
	}
	if got := httppolicy.RateLimitHold(200, h(now, ""), now, 1); got != 1200*time.Millisecond {
		t.Errorf("without Date: Hold = %v, want 1.2s", got)
	}
	if got := httppolicy.RateLimitHold(200, h(now.Add(30*time.Second), "yesterday"), now, 1); got != 1800*time.Millisecond {
		t.Errorf("with a malformed Date, the server 30 s ahead: Hold = %v, want 1.8s (our clock)", got)
	}
}

// FuzzRateLimitHold feeds every header RateLimitHold reads with arbitrary values, the limits
// and the call's cost included: it must never panic, never return a
// negative hold or one beyond a day, and be a function of its input; only a
// 429, a 503 or a bucket short of what the next call needs may hold; a
// named limit (continuous refill) never holds longer than the same
// response without it (until the reset); and a dearer call never holds
// less.
func FuzzRateLimitHold(f *testing.F) {
	for _, s := range []string{"0", "1s", "6m0s", "20ms", "1m30.5s", "2026-12-03T12:00:05Z",
		"2026-12-03T12:00:01.5+01:00", "-1s", "1e9s", ".5s", "1", "", "NaN", "9999999999999999999", "0.000001ns"} {
		f.Add(429, s, s, "0", "60", 0)
		f.Add(200, "", s, "0", "60000", 1000)
		f.Add(200, "", s, "400", s, 1000)
	}
	f.Add(200, "", "24h0m0s", "0", "9223372036854775807", -1)
	f.Add(200, "", "5.96s", "999", "1000", 1<<62)
	keys := []string{
		"X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens",
		"Anthropic-Ratelimit-Requests-Reset", "Anthropic-Ratelimit-Tokens-Reset",
		"Anthropic-Ratelimit-Input-Tokens-Reset", "Anthropic-Ratelimit-Output-Tokens-Reset",
	}
	rems := []string{
		"X-Ratelimit-Remaining-Requests", "X-Ratelimit-Remaining-Tokens",
		"Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Tokens-Remaining",
		"Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Remaining",
	}
	limits := []string{
		"X-Ratelimit-Limit-Requests", "X-Ratelimit-Limit-Tokens",
		"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Tokens-Limit",
		"Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Limit",
	}
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, status int, retryAfter, reset, remaining, limit string, cost int) {
		h := http.Header{}
		h["Retry-After"] = []string{retryAfter}
		h["Retry-After-Ms"] = []string{retryAfter}
		for i := range keys {
			h[keys[i]] = []string{reset}
			h[rems[i]] = []string{remaining}
		}
		without := httppolicy.RateLimitHold(status, h, now, cost)
		for i := range limits {
			h[limits[i]] = []string{limit}
		}
		d := httppolicy.RateLimitHold(status, h, now, cost)
		if d < 0 || d > 24*time.Hour {
			t.Fatalf("Hold(%d, %q, %q, %q, %q, %d) = %v, outside [0, 24h]", status, retryAfter, reset, remaining, limit, cost, d)
		}
		if d2 := httppolicy.RateLimitHold(status, h, now, cost); d2 != d {
			t.Fatalf("Hold not deterministic: %v then %v", d, d2)
		}
		n, counted := count(trimmed(remaining))
		if status != 429 && status != 503 && !(counted && (n == 0 || n < uint64(max(cost, 1)))) && d != 0 {
			// Only a short count (or a 429/503) may hold.
			t.Fatalf("Hold(%d) = %v with remaining %q, cost %d: nothing was short", status, d, remaining, cost)
		}
		if d > without {
			t.Fatalf("Hold with limit %q = %v, longer than without it, %v", limit, d, without)
		}
		if cost >= 0 && cost < math.MaxInt {
			if dearer := httppolicy.RateLimitHold(status, h, now, cost+1); dearer < d {
				t.Fatalf("cost %d holds %v, cost %d only %v", cost, d, cost+1, dearer)
			}
		}
	})
}

// count parses a remaining count as RateLimitHold does: decimal digits only, at
// most math.MaxInt64.
func count(s string) (uint64, bool) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 63)
	return n, err == nil
}

func trimmed(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// LimiterSignals of a nil Limiter is nil, so that a Transport without one
// has no Signals; two built for the same Limiter are equal.
func TestLimiterSignalsNilAndEqual(t *testing.T) {
	if s := httppolicy.LimiterSignals(nil); s != nil {
		t.Errorf("LimiterSignals(nil) = %v, want nil", s)
	}
	l, err := ratelimit.New(ratelimit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if httppolicy.LimiterSignals(l) != httppolicy.LimiterSignals(l) {
		t.Error("two LimiterSignals of one Limiter differ")
	}
}

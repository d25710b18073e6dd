package ratelimit_test

import (
	"net/http"
	"testing"
	"time"

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

func TestHold(t *testing.T) {
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
			if got := ratelimit.Hold(tt.status, tt.h, t0, tt.cost); got != tt.want {
				t.Errorf("Hold = %v, want %v", got, tt.want)
			}
		})
	}
}

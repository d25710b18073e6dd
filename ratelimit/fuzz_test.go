package ratelimit_test

import (
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/watertight/watertight/ratelimit"
)

// FuzzHold feeds every header Hold reads with arbitrary values, the limits
// and the call's cost included: it must never panic, never return a
// negative hold or one beyond a day, and be a function of its input; only a
// 429, a 503 or a bucket short of what the next call needs may hold; a
// named limit (continuous refill) never holds longer than the same
// response without it (until the reset); and a dearer call never holds
// less.
func FuzzHold(f *testing.F) {
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
		without := ratelimit.Hold(status, h, now, cost)
		for i := range limits {
			h[limits[i]] = []string{limit}
		}
		d := ratelimit.Hold(status, h, now, cost)
		if d < 0 || d > 24*time.Hour {
			t.Fatalf("Hold(%d, %q, %q, %q, %q, %d) = %v, outside [0, 24h]", status, retryAfter, reset, remaining, limit, cost, d)
		}
		if d2 := ratelimit.Hold(status, h, now, cost); d2 != d {
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
			if dearer := ratelimit.Hold(status, h, now, cost+1); dearer < d {
				t.Fatalf("cost %d holds %v, cost %d only %v", cost, d, cost+1, dearer)
			}
		}
	})
}

// count parses a remaining count as Hold does: decimal digits only, at
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

// FuzzConfig checks that New either fails with a message naming a field or
// returns a Limiter that admits a call.
func FuzzConfig(f *testing.F) {
	f.Add(0.0, 0, 0.0, 0, int64(0), int64(0))
	f.Add(10.0, 1, 60000.0, 0, int64(time.Second), int64(-1))
	f.Add(-1.0, -1, -1.0, -1, int64(-1), int64(-1))
	f.Fuzz(func(t *testing.T, rps float64, burst int, tpm float64, tburst int, maxHold, maxWait int64) {
		l, err := ratelimit.New(ratelimit.Config{RequestsPerSecond: rps, Burst: burst, TokensPerMinute: tpm,
			TokenBurst: tburst, MaxHold: time.Duration(maxHold), MaxWait: time.Duration(maxWait)})
		if err != nil {
			if l != nil {
				t.Fatal("a Limiter with an error")
			}
			return
		}
		if l.MaxWait() <= 0 {
			t.Fatalf("MaxWait %v", l.MaxWait())
		}
	})
}

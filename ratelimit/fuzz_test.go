package ratelimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/watertight/watertight/ratelimit"
)

// FuzzHold feeds every header Hold reads with arbitrary values: it must
// never panic, never return a negative hold or one beyond a day, and be a
// function of its input.
func FuzzHold(f *testing.F) {
	for _, s := range []string{"0", "1s", "6m0s", "20ms", "1m30.5s", "2026-12-03T12:00:05Z",
		"2026-12-03T12:00:01.5+01:00", "-1s", "1e9s", ".5s", "1", "", "NaN", "9999999999999999999", "0.000001ns"} {
		f.Add(429, s, s, "0")
		f.Add(200, "", s, "0")
	}
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
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, status int, retryAfter, reset, remaining string) {
		h := http.Header{}
		h["Retry-After"] = []string{retryAfter}
		h["Retry-After-Ms"] = []string{retryAfter}
		for i := range keys {
			h[keys[i]] = []string{reset}
			h[rems[i]] = []string{remaining}
		}
		d := ratelimit.Hold(status, h, now)
		if d < 0 || d > 24*time.Hour {
			t.Fatalf("Hold(%d, %q, %q, %q) = %v, outside [0, 24h]", status, retryAfter, reset, remaining, d)
		}
		if d2 := ratelimit.Hold(status, h, now); d2 != d {
			t.Fatalf("Hold not deterministic: %v then %v", d, d2)
		}
		if status != 429 && status != 503 && !zero(trimmed(remaining)) && d != 0 {
			// Only a spent count (or a 429/503) may hold.
			t.Fatalf("Hold(%d) = %v with remaining %q: nothing was spent", status, d, remaining)
		}
	})
}

// zero reports whether s is a count of 0: 1 to 19 zeros.
func zero(s string) bool {
	if s == "" || len(s) > 19 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
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

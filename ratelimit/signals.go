package ratelimit

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/watertight/watertight/httppolicy"
)

// The rate-limit headers read by [Hold], in canonical form, so that they
// are looked up in the header map without being canonicalised again.
var (
	openAIKinds = [...]struct{ remaining, reset string }{
		{"X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
		{"X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
	}
	anthropicKinds = [...]struct{ remaining, reset string }{
		{"Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
		{"Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
		{"Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset"},
		{"Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"},
	}
)

// Hold returns how long a response with status code status and headers h,
// received at now, asks every call to the dependency to hold off: 0 if it
// asks for nothing. It reads:
//
//   - on a 429 or 503, Retry-After-Ms and Retry-After (see
//     [httppolicy.ParseRetryAfter]);
//   - OpenAI's x-ratelimit-remaining-requests and -tokens, with
//     x-ratelimit-reset-requests and -tokens, durations such as "1s",
//     "6m0s", "20ms" or "1m30.5s";
//   - Anthropic's anthropic-ratelimit-{requests,tokens,input-tokens,
//     output-tokens}-remaining, with the matching -reset, an RFC 3339 time.
//
// A kind whose remaining count is 0 holds until its reset; a 429 holds at
// least as long as its Retry-After, and, when it names neither a
// Retry-After nor a spent kind, until the earliest reset it names. The
// result is the longest of these. Values that do not parse (a sign, a
// unit-less number, garbage), a reset in the past and anything further
// than a day away are ignored. It never panics; h may be nil. It is safe
// for concurrent use.
func Hold(status int, h http.Header, now time.Time) time.Duration {
	var hold time.Duration
	throttled := status == http.StatusTooManyRequests
	if throttled || status == http.StatusServiceUnavailable {
		if d, ok := httppolicy.ParseRetryAfter(h, now); ok && d <= maxSignal {
			hold = d
		}
	}
	if len(h) == 0 {
		return hold
	}
	// earliest is the nearest reset named, for a 429 that says nothing
	// else; -1: none.
	earliest := time.Duration(-1)
	note := func(remaining, reset string, parse func(string, time.Time) (time.Duration, bool)) {
		v := first(h, reset)
		if v == "" {
			return
		}
		d, ok := parse(v, now)
		if !ok {
			return
		}
		if earliest < 0 || d < earliest {
			earliest = d
		}
		if n, ok := parseCount(first(h, remaining)); ok && n == 0 {
			hold = max(hold, d)
		}
	}
	for _, k := range openAIKinds {
		note(k.remaining, k.reset, parseReset)
	}
	for _, k := range anthropicKinds {
		note(k.remaining, k.reset, parseResetTime)
	}
	if throttled && hold == 0 && earliest > 0 {
		hold = earliest
	}
	return hold
}

// spent reports whether h holds a remaining count of 0 of any kind: the
// only way a response other than a 429 or 503 can ask for a hold.
func spent(h http.Header) bool {
	if len(h) == 0 {
		return false
	}
	for _, k := range openAIKinds {
		if n, ok := parseCount(first(h, k.remaining)); ok && n == 0 {
			return true
		}
	}
	for _, k := range anthropicKinds {
		if n, ok := parseCount(first(h, k.remaining)); ok && n == 0 {
			return true
		}
	}
	return false
}

// remainingRequests returns the remaining request count a response names
// (OpenAI's, else Anthropic's), if any, with the limit it names for it (0
// if none).
func remainingRequests(h http.Header) (n, limit int, ok bool) {
	for _, k := range [...][2]string{
		{openAIKinds[0].remaining, "X-Ratelimit-Limit-Requests"},
		{anthropicKinds[0].remaining, "Anthropic-Ratelimit-Requests-Limit"},
	} {
		if r, ok := parseCount(first(h, k[0])); ok {
			l, _ := parseCount(first(h, k[1]))
			return int(min(r, math.MaxInt32)), int(min(l, math.MaxInt32)), true
		}
	}
	return 0, 0, false
}

// first returns the first value of the canonical key in h, trimmed.
func first(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return strings.Trim(v[0], " \t")
	}
	return ""
}

// parseCount parses a remaining count: decimal digits only (no sign, no
// space), at most math.MaxInt64; anything else is malformed.
func parseCount(s string) (int64, bool) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false // ParseUint takes neither a sign nor a space, but be plain
	}
	n, err := strconv.ParseUint(s, 10, 63)
	if err != nil {
		return 0, false
	}
	return int64(n), true
}

// parseReset parses an OpenAI reset, a Go-style duration ("1s", "6m0s",
// "20ms", "1m30.5s", "0.5s"): it must start with a digit, carry a unit,
// and be at most a day.
func parseReset(s string, _ time.Time) (time.Duration, bool) {
	if s == "" || s[0] < '0' || s[0] > '9' || len(s) > 64 {
		return 0, false
	}
	// time.ParseDuration takes "0" without a unit; a reset must name one.
	last := s[len(s)-1]
	if last >= '0' && last <= '9' || last == '.' {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > maxSignal {
		return 0, false
	}
	return d, true
}

// parseResetTime parses an Anthropic reset, an RFC 3339 time, into the
// time left from now: it must be in the future, and at most a day away.
func parseResetTime(s string, now time.Time) (time.Duration, bool) {
	if len(s) > 64 {
		return 0, false
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d <= 0 || d > maxSignal {
		return 0, false
	}
	return d, true
}

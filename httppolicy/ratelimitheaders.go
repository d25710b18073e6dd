package httppolicy

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/watertight/watertight/ratelimit"
)

// maxRateLimitSignal is the longest wait a rate-limit header may name and
// still be believed: a Retry-After or a reset further away than a day is
// taken for garbage and ignored, not capped.
const maxRateLimitSignal = 24 * time.Hour

// bucket names the headers of one of a provider's rate limits, in
// canonical form so that they are looked up in the header map without
// being canonicalised again. costly: a call takes its declared cost (see
// [ratelimit.WithCost]) from this bucket, not 1.
type bucket struct {
	limit, remaining, reset string
	costly                  bool
}

// The rate-limit headers read by [RateLimitHold].
var (
	openAIBuckets = [...]bucket{
		{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests", false},
		{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens", true},
	}
	// Anthropic's tokens bucket is the most restrictive of its token
	// limits, as the call's whole cost is; the input and output buckets
	// each see only part of it, so a call is taken to need 1 of them.
	anthropicBuckets = [...]bucket{
		{"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset", false},
		{"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset", true},
		{"Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset", false},
		{"Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset", false},
	}
)

// RateLimitHold returns how long a response with status code status and
// headers h, received at now, asks every call to the dependency to hold
// off: 0 if it asks for nothing. cost is what the next call needs from a
// tokens bucket (the cost the call that got the response declared with
// [ratelimit.WithCost]: the next ones are taken to be alike); 0 or less
// counts as 1. It reads:
//
//   - on a 429 or 503, Retry-After-Ms and Retry-After (see
//     [ParseRetryAfter]);
//   - OpenAI's x-ratelimit-limit-, -remaining- and -reset-requests and
//     -tokens, the reset a duration such as "1s", "6m0s", "20ms" or
//     "1m30.5s";
//   - Anthropic's anthropic-ratelimit-{requests,tokens,input-tokens,
//     output-tokens}-limit, -remaining and -reset, the reset an RFC 3339
//     time on the server's clock: read against the response's Date header
//     when it has a valid one (reset - Date, Date being in whole seconds),
//     else against now.
//
// Both providers refill each bucket continuously, and both name as its
// reset the moment it will be full again, not the moment the next request
// is allowed: a bucket of limit L with n left and its reset r away refills
// at (L-n)/r a second, so a call that needs c of it (c > n) can go after
// (c-n)*r/(L-n). With n = 0 and c = 1, that is r/L: a minute's quota of 60
// requests spent, reset in 60 s, frees one request a second, not none for a
// minute. A bucket that is short for the next call (its remaining count
// below what the call needs: 0 for requests) holds for that long; without
// a usable limit (absent, malformed, or not above the remaining count) it
// holds until the reset, the one time the bucket is sure to have room.
//
// A 429 holds at least as long as its Retry-After. One that names no
// Retry-After said no without saying for how long: every bucket is then
// taken to be short of one more than it has (one, if it names no count),
// and the hold lasts until each has refilled that much (for a 429 on a
// requests bucket with n of L left and its reset r away: r/(L-n)).
// The result is the longest of these. Values that do not parse (a
// sign, a unit-less reset, garbage), a reset in the past and anything
// further than a day away are ignored. It never panics; h may be nil. It
// is safe for concurrent use.
func RateLimitHold(status int, h http.Header, now time.Time, cost int) time.Duration {
	var hold time.Duration
	throttled := status == http.StatusTooManyRequests
	if throttled || status == http.StatusServiceUnavailable {
		if d, ok := ParseRetryAfter(h, now); ok && d <= maxRateLimitSignal {
			hold = d
		}
	}
	if len(h) == 0 {
		return hold
	}
	// A 429 that names no Retry-After said no without saying for how
	// long: every bucket is taken to be short of one more than it has (a
	// bucket naming no count, of one).
	blind := throttled && hold == 0
	note := func(b bucket, parse func(string, time.Time) (time.Duration, bool)) {
		v := first(h, b.reset)
		if v == "" {
			return
		}
		r, ok := parse(v, now)
		if !ok {
			return
		}
		n, ok := parseCount(first(h, b.remaining))
		if !ok {
			if !blind {
				return
			}
			n = 0
		}
		need := int64(1)
		if b.costly {
			need = int64(max(cost, 1))
		}
		if blind && n >= need && n < math.MaxInt64 {
			need = n + 1
		}
		if n >= need {
			return
		}
		limit, _ := parseCount(first(h, b.limit))
		hold = max(hold, refill(n, need, limit, r))
	}
	for _, b := range openAIBuckets {
		note(b, parseReset)
	}
	if h[anthropicBuckets[0].reset] != nil || h[anthropicBuckets[1].reset] != nil ||
		h[anthropicBuckets[2].reset] != nil || h[anthropicBuckets[3].reset] != nil {
		clock := serverClock(h, now)
		for _, b := range anthropicBuckets {
			note(b, func(v string, _ time.Time) (time.Duration, bool) { return parseResetTime(v, clock) })
		}
	}
	return hold
}

// refill returns how long a bucket with n left of limit, full again in r
// (refilled continuously, at (limit-n)/r), takes to hold need (> n): r
// itself when the limit says nothing usable, or the need exceeds it.
func refill(n, need, limit int64, r time.Duration) time.Duration {
	if limit <= n || need >= limit {
		return r
	}
	// In float64: r <= a day (< 2^47 ns), so the product stays exact to
	// well under a nanosecond's worth of relative error, and cannot
	// overflow as int64 arithmetic on counts up to 2^63 could.
	d := time.Duration(math.Ceil(float64(r) * float64(need-n) / float64(limit-n)))
	return min(max(d, 0), r)
}

// short reports whether h holds a remaining count below what the next call
// needs (0 for requests, less than cost for tokens; see [RateLimitHold]) in any
// bucket: the only way a response other than a 429 or 503 can ask for a
// hold. cost is read only if a tokens bucket names a count.
func short(h http.Header, cost func() int) bool {
	if len(h) == 0 {
		return false
	}
	c := -1
	check := func(b bucket) bool {
		n, ok := parseCount(first(h, b.remaining))
		if !ok {
			return false
		}
		if n == 0 {
			return true
		}
		if !b.costly {
			return false
		}
		if c < 0 {
			c = cost()
		}
		return n < int64(c)
	}
	for _, b := range openAIBuckets {
		if check(b) {
			return true
		}
	}
	for _, b := range anthropicBuckets {
		if check(b) {
			return true
		}
	}
	return false
}

// remainingRequests returns the remaining request count a response names
// (OpenAI's, else Anthropic's), if any, with the limit it names for it (0
// if none).
func remainingRequests(h http.Header) (n, limit int, ok bool) {
	for _, b := range [...]bucket{openAIBuckets[0], anthropicBuckets[0]} {
		if r, ok := parseCount(first(h, b.remaining)); ok {
			l, _ := parseCount(first(h, b.limit))
			return int(min(r, math.MaxInt32)), int(min(l, math.MaxInt32)), true
		}
	}
	return 0, 0, false
}

// requestsFullAt returns when the requests bucket a response names
// (OpenAI's, else Anthropic's) will be full again, received at now: now
// plus its reset, if it names a valid one.
func requestsFullAt(h http.Header, now time.Time) (time.Time, bool) {
	if v := first(h, openAIBuckets[0].reset); v != "" {
		if r, ok := parseReset(v, now); ok {
			return now.Add(r), true
		}
		return time.Time{}, false
	}
	if v := first(h, anthropicBuckets[0].reset); v != "" {
		if r, ok := parseResetTime(v, serverClock(h, now)); ok {
			return now.Add(r), true
		}
	}
	return time.Time{}, false
}

// serverClock returns the server's time when it sent a response received
// at now: its Date header, if it has a valid one, else now. An Anthropic
// reset is a time on the server's clock: read against ours, a server 30 s
// ahead would hold 30 s too long. Date is in whole seconds, so a reset
// read against it may be up to a second long.
func serverClock(h http.Header, now time.Time) time.Time {
	if v := first(h, "Date"); v != "" {
		if t, err := http.ParseTime(v); err == nil {
			return t
		}
	}
	return now
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
	if err != nil || d < 0 || d > maxRateLimitSignal {
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
	if d <= 0 || d > maxRateLimitSignal {
		return 0, false
	}
	return d, true
}

// rateLimitAnswer reads the rate-limit headers of resp, received at now,
// into what a ratelimit.Limiter is told: the hold they ask for (see
// [RateLimitHold]; the cost is the one the call declared with
// [ratelimit.WithCost], if any) and the requests bucket they name
// (OpenAI's, else Anthropic's).
func rateLimitAnswer(resp *http.Response, now time.Time) ratelimit.Answer {
	// The call's cost is looked up (a walk up its context) only if a
	// tokens bucket names a count, and once.
	c := -1
	cost := func() int {
		if c < 0 {
			c = 0
			if resp.Request != nil {
				c = ratelimit.Cost(resp.Request.Context())
			}
		}
		return c
	}
	var a ratelimit.Answer
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable || short(resp.Header, cost) {
		a.Hold = RateLimitHold(resp.StatusCode, resp.Header, now, cost())
	}
	a.Remaining, a.Limit, a.Counted = remainingRequests(resp.Header)
	a.FullAt, _ = requestsFullAt(resp.Header, now)
	return a
}

package httppolicy

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/watertight/watertight/ratelimit"
)

// Signals is told of every response a [Transport]'s attempts receive.
// Observe is called on the attempt's goroutine once the headers are in,
// before the attempt's outcome reaches the policies. It must not read,
// close or keep the body. It must be safe for concurrent use and quick.
// A panic in Observe goes up through the attempt.
type Signals interface {
	Observe(resp *http.Response)
}

// LimiterSignals returns the Signals that pass l.Observe the hold
// ([RateLimitHold], for the request's [ratelimit.WithCost]) and the
// requests bucket each response names. A nil response is ignored. If l
// is nil, it returns nil. Two Signals for the same l are equal. They are
// safe for concurrent use.
func LimiterSignals(l *ratelimit.Limiter) Signals {
	if l == nil {
		return nil
	}
	return limiterSignals{l}
}

type limiterSignals struct{ l *ratelimit.Limiter }

func (s limiterSignals) Observe(resp *http.Response) {
	if resp != nil {
		s.l.Observe(rateLimitAnswer(resp, time.Now()))
	}
}

// maxRateLimitSignal is the longest wait a rate-limit header may name: a
// longer one is ignored, not capped.
const maxRateLimitSignal = 24 * time.Hour

// bucket names the headers of one of a provider's rate limits, in
// canonical form. A call takes its declared cost from a costly bucket,
// and 1 from the others. An Anthropic reset is an RFC 3339 time.
type bucket struct {
	limit, remaining, reset string
	costly, anthropic       bool
}

// buckets are the rate-limit headers read by [RateLimitHold]. Anthropic's
// input and output buckets each see only part of a call's cost.
var buckets = [...]bucket{
	{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests", false, false},
	{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens", true, false},
	{"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset", false, true},
	{"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset", true, true},
	{"Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset", false, true},
	{"Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset", false, true},
}

// resetIn returns how long until bucket b of h, received at now, is full.
func (b bucket) resetIn(h http.Header, now time.Time) (time.Duration, bool) {
	v := first(h, b.reset)
	if v == "" || !b.anthropic {
		return parseReset(v)
	}
	// An Anthropic reset is a time on the server's clock: read it against
	// the response's valid Date.
	if t, err := http.ParseTime(first(h, "Date")); err == nil {
		now = t
	}
	return parseResetTime(v, now)
}

// RateLimitHold returns how long a response with status code status and
// headers h, received at now, asks every call to the dependency to hold
// off: 0 if it asks for nothing. cost is what the next call needs from a
// tokens bucket; 0 or less counts as 1. It reads:
//
//   - on a 429 or 503, Retry-After-Ms and Retry-After ([ParseRetryAfter]);
//   - OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens}, the
//     reset a duration such as "6m0s";
//   - Anthropic's anthropic-ratelimit-{requests,tokens,input-tokens,
//     output-tokens}-{limit,remaining,reset}, the reset an RFC 3339 time
//     read against the response's valid Date header, else against now.
//
// Both providers refill a bucket continuously; its reset is when it is
// full again. A bucket of limit L with n left, full in r, is short for a
// call that needs c > n: it holds (c-n)*r/(L-n), or r if c >= L or the
// limit is absent, malformed or not above n.
//
// A 429 holds at least as long as its Retry-After. Without one, every
// bucket is taken to be short of one more than it has (one, if it names
// no count). The result is the longest of these holds. Values that do not
// parse, a reset in the past and anything further than a day away are
// ignored. It never panics; h may be nil. It is safe for concurrent use.
func RateLimitHold(status int, h http.Header, now time.Time, cost int) time.Duration {
	var hold time.Duration
	throttled := status == http.StatusTooManyRequests
	if throttled || status == http.StatusServiceUnavailable {
		if d, ok := ParseRetryAfter(h, now); ok && d <= maxRateLimitSignal {
			hold = d
		}
	}
	blind := throttled && hold == 0
	for _, b := range buckets {
		r, ok := b.resetIn(h, now)
		n, counted := parseCount(first(h, b.remaining))
		if !ok || !counted && !blind {
			continue
		}
		need := int64(1)
		if b.costly {
			need = int64(max(cost, 1))
		}
		if blind && n >= need && n < math.MaxInt64 {
			need = n + 1
		}
		if n < need {
			limit, _ := parseCount(first(h, b.limit))
			hold = max(hold, refill(n, need, limit, r))
		}
	}
	return hold
}

// refill returns how long a bucket with n left of limit, full again in r,
// takes to hold need (> n).
func refill(n, need, limit int64, r time.Duration) time.Duration {
	if limit <= n || need >= limit {
		return r
	}
	// In float64: int64 arithmetic on counts up to 2^63 could overflow.
	d := time.Duration(math.Ceil(float64(r) * float64(need-n) / float64(limit-n)))
	return min(max(d, 0), r)
}

// first returns the first value of the canonical key in h, trimmed.
func first(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return strings.Trim(v[0], " \t")
	}
	return ""
}

// parseCount parses a count: decimal digits only, at most math.MaxInt64.
func parseCount(s string) (int64, bool) {
	n, err := strconv.ParseUint(s, 10, 63)
	if err != nil {
		return 0, false
	}
	return int64(n), true
}

// parseReset parses an OpenAI reset, a Go duration with a unit ("6m0s").
func parseReset(s string) (time.Duration, bool) {
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
// time left from now.
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
// into what a ratelimit.Limiter is told: the hold, and the requests
// bucket, OpenAI's or else Anthropic's.
func rateLimitAnswer(resp *http.Response, now time.Time) ratelimit.Answer {
	cost := 0
	if resp.Request != nil {
		cost = ratelimit.Cost(resp.Request.Context())
	}
	h := resp.Header
	a := ratelimit.Answer{Hold: RateLimitHold(resp.StatusCode, h, now, cost)}
	for _, b := range [...]bucket{buckets[0], buckets[2]} {
		if n, ok := parseCount(first(h, b.remaining)); ok && !a.Counted {
			l, _ := parseCount(first(h, b.limit))
			a.Remaining, a.Limit, a.Counted = int(min(n, math.MaxInt32)), int(min(l, math.MaxInt32)), true
		}
	}
	b := buckets[0]
	if first(h, b.reset) == "" {
		b = buckets[2]
	}
	if r, ok := b.resetIn(h, now); ok {
		a.FullAt = now.Add(r)
	}
	return a
}

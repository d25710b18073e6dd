package httppolicy

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxDuration is the longest time.Duration: huge values saturate to it.
const maxDuration = time.Duration(math.MaxInt64)

// ParseRetryAfter returns how long the server asked the client to wait
// before trying again, from the headers h of a response received at now.
// It reads, in this order:
//
//   - Retry-After-Ms: milliseconds, digits with an optional fraction
//     ("1500", "12.5"), as OpenAI and Anthropic send it;
//   - Retry-After as delta-seconds ("120");
//   - Retry-After as an HTTP-date (any format [http.ParseTime] accepts):
//     the time left until then, or 0 if it has passed.
//
// It returns false if neither header holds a valid value: signs,
// exponents, inner spaces, "inf" and "NaN" are invalid. Leading and
// trailing spaces and tabs are ignored. Values too large for a
// time.Duration saturate to the largest one. It never panics; h may be
// nil. It is safe for concurrent use.
func ParseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := parseMillis(first(h, "Retry-After-Ms")); ok {
		return d, true
	}
	v := first(h, "Retry-After")
	if d, ok := parseSeconds(v); ok {
		return d, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// parseSeconds parses delta-seconds (1*DIGIT), saturating.
func parseSeconds(s string) (time.Duration, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	if n > uint64(maxDuration/time.Second) {
		return maxDuration, true
	}
	return time.Duration(n) * time.Second, true
}

// parseMillis parses DIGITS [ "." DIGITS ], at least one digit in all,
// saturating.
func parseMillis(s string) (time.Duration, bool) {
	if strings.Trim(s, "0123456789.") != "" || strings.Count(s, ".") > 1 || strings.Trim(s, ".") == "" {
		return 0, false
	}
	ms, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	// float64(math.MaxInt64) is 2^63, so >= catches every overflow.
	if ns := ms * float64(time.Millisecond); ns < float64(math.MaxInt64) {
		return time.Duration(math.Ceil(ns)), true
	}
	return maxDuration, true
}

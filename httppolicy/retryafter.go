package httppolicy

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxDuration is the longest time.Duration: huge Retry-After values
// saturate to it instead of overflowing.
const maxDuration = time.Duration(math.MaxInt64)

// ParseRetryAfter returns how long the server asked the client to wait
// before trying again, from the headers h of a response received at now.
// It reads, in this order:
//
//   - Retry-After-Ms: milliseconds, a non-negative decimal number with an
//     optional fraction ("1500", "12.5"), as sent by OpenAI and Anthropic;
//   - Retry-After as delta-seconds: a non-negative integer ("120");
//   - Retry-After as an HTTP-date ("Fri, 31 Dec 1999 23:59:59 GMT", or any
//     format [http.ParseTime] accepts): the time left until then, or 0 if
//     that time has passed.
//
// A Retry-After-Ms that does not parse falls back to Retry-After. It returns
// false if neither header holds a valid value: signs, exponents, spaces
// inside the number, "inf", "NaN" and other garbage are invalid. Leading and
// trailing spaces and tabs are ignored. The result is never negative, and
// values too large for a time.Duration (about 292 years) saturate to the
// largest one rather than overflow. It never panics; h may be nil. It is
// safe for concurrent use.
func ParseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := trim(h.Get("Retry-After-Ms")); v != "" {
		if d, ok := parseMillis(v); ok {
			return d, true
		}
	}
	v := trim(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if d, ok := parseSeconds(v); ok {
		return d, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	// Sub saturates on overflow; a date in the past means "now".
	return max(t.Sub(now), 0), true
}

func trim(s string) string { return strings.Trim(s, " \t") }

// parseSeconds parses delta-seconds (1*DIGIT), saturating.
func parseSeconds(s string) (time.Duration, bool) {
	const maxSeconds = int64(maxDuration / time.Second)
	if s == "" {
		return 0, false
	}
	var n int64
	saturated := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if !saturated {
			n = n*10 + int64(c-'0')
			if n > maxSeconds {
				saturated = true
			}
		}
	}
	if saturated {
		return maxDuration, true
	}
	return time.Duration(n) * time.Second, true
}

// parseMillis parses DIGITS [ "." DIGITS ] (at least one digit in all),
// saturating.
func parseMillis(s string) (time.Duration, bool) {
	digits, dots := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return 0, false
		}
	}
	if digits == 0 || dots > 1 {
		return 0, false
	}
	ms, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	ns := ms * float64(time.Millisecond)
	// float64(math.MaxInt64) rounds up to 2^63, so >= catches every value
	// that would overflow the conversion, +Inf included.
	if ns >= float64(math.MaxInt64) {
		return maxDuration, true
	}
	return time.Duration(math.Ceil(ns)), true
}

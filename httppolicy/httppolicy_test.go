package httppolicy_test

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/watertight/watertight/httppolicy"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	max := time.Duration(math.MaxInt64)
	tests := []struct {
		name   string
		ra, ms string
		want   time.Duration
		ok     bool
	}{
		{"none", "", "", 0, false},
		{"seconds", "120", "", 120 * time.Second, true},
		{"zero", "0", "", 0, true},
		{"spaces", " \t7 ", "", 7 * time.Second, true},
		{"leading zeros", "0005", "", 5 * time.Second, true},
		{"negative", "-5", "", 0, false},
		{"plus", "+5", "", 0, false},
		{"fraction in seconds", "1.5", "", 0, false},
		{"garbage", "soon", "", 0, false},
		{"inner space", "1 2", "", 0, false},
		{"huge seconds saturate", "99999999999999999999999999", "", max, true},
		{"just fits", "9223372036", "", 9223372036 * time.Second, true},
		{"just over", "9223372037", "", max, true},
		{"HTTP-date", now.Add(90 * time.Second).Format(http.TimeFormat), "", 90 * time.Second, true},
		{"RFC 850 date", now.Add(time.Hour).Format("Monday, 02-Jan-06 15:04:05 GMT"), "", time.Hour, true},
		{"ANSI C date", now.Add(time.Minute).Format(time.ANSIC), "", time.Minute, true},
		{"past date", now.Add(-time.Hour).Format(http.TimeFormat), "", 0, true},
		{"far future date", "Fri, 31 Dec 9999 23:59:59 GMT", "", max, true},
		{"ms", "", "1500", 1500 * time.Millisecond, true},
		{"ms fraction", "", "12.5", 12500 * time.Microsecond, true},
		{"ms fraction rounds up", "", "0.0000001", 1, true},
		{"ms leading dot", "", ".5", 500 * time.Microsecond, true},
		{"ms trailing dot", "", "5.", 5 * time.Millisecond, true},
		{"ms zero", "", "0", 0, true},
		{"ms wins", "10", "50", 50 * time.Millisecond, true},
		{"ms negative falls back", "10", "-50", 10 * time.Second, true},
		{"ms garbage falls back", "10", "abc", 10 * time.Second, true},
		{"ms garbage alone", "", "abc", 0, false},
		{"ms exponent", "", "1e3", 0, false},
		{"ms inf", "", "inf", 0, false},
		{"ms NaN", "", "NaN", 0, false},
		{"ms hex", "", "0x10", 0, false},
		{"ms two dots", "", "1.2.3", 0, false},
		{"ms dot only", "", ".", 0, false},
		{"ms huge saturates", "", "100000000000000000000000", max, true},
		{"ms beyond float range saturates", "", func() string {
			b := make([]byte, 400)
			for i := range b {
				b[i] = '9'
			}
			return string(b)
		}(), max, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.ra != "" {
				h.Set("Retry-After", tt.ra)
			}
			if tt.ms != "" {
				h.Set("Retry-After-Ms", tt.ms)
			}
			got, ok := httppolicy.ParseRetryAfter(h, now)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("ParseRetryAfter(%q, %q) = %v, %v; want %v, %v", tt.ra, tt.ms, got, ok, tt.want, tt.ok)
			}
		})
	}
	if d, ok := httppolicy.ParseRetryAfter(nil, now); d != 0 || ok {
		t.Fatal("nil header")
	}
}

func TestDefaultIsFailure(t *testing.T) {
	tests := []struct {
		code int
		want bool
	}{
		{200, false}, {204, false}, {301, false}, {400, false}, {401, false}, {404, false},
		{408, true}, {409, false}, {429, true}, {499, false},
		{500, true}, {501, true}, {502, true}, {503, true}, {504, true}, {599, true},
	}
	for _, tt := range tests {
		if got := httppolicy.DefaultIsFailure(&http.Response{StatusCode: tt.code}); got != tt.want {
			t.Errorf("DefaultIsFailure(%d) = %v", tt.code, got)
		}
	}
	if httppolicy.DefaultIsFailure(nil) {
		t.Error("nil response is a failure")
	}
}

func TestStatusError(t *testing.T) {
	tests := []struct {
		err       *httppolicy.StatusError
		msg, kind string
		wait      time.Duration
	}{
		{&httppolicy.StatusError{StatusCode: 503, RetryAfterDelay: time.Second}, "httppolicy: response status 503 Service Unavailable", "503", time.Second},
		{&httppolicy.StatusError{StatusCode: 599}, "httppolicy: response status 599", "599", 0},
		{&httppolicy.StatusError{}, "httppolicy: response status 0", "0", 0},
	}
	for _, tt := range tests {
		if tt.err.Error() != tt.msg || tt.err.ErrorType() != tt.kind || tt.err.RetryAfter() != tt.wait {
			t.Errorf("got %q %q %v", tt.err.Error(), tt.err.ErrorType(), tt.err.RetryAfter())
		}
	}
}

func TestNewDependencyTransport(t *testing.T) {
	for _, limit := range []int{1, 10, 500} {
		tr := httppolicy.NewDependencyTransport(limit)
		if tr.MaxConnsPerHost != limit || tr.MaxIdleConnsPerHost != limit || tr.MaxIdleConns < limit {
			t.Errorf("limit %d: %d %d %d", limit, tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost, tr.MaxIdleConns)
		}
		if tr == http.DefaultTransport || tr.Proxy == nil || !tr.ForceAttemptHTTP2 {
			t.Errorf("limit %d: not a clone of DefaultTransport", limit)
		}
	}
	if http.DefaultTransport.(*http.Transport).MaxConnsPerHost != 0 {
		t.Error("DefaultTransport modified")
	}
	for _, limit := range []int{0, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("limit %d: no panic", limit)
				}
			}()
			httppolicy.NewDependencyTransport(limit)
		}()
	}
}

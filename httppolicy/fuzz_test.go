package httppolicy

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, s := range [][2]string{
		{"", ""}, {"120", ""}, {"0", ""}, {"-1", ""}, {"99999999999999999999999", ""},
		{now.Add(time.Minute).Format(http.TimeFormat), ""}, {"Sun, 06 Nov 1994 08:49:37 GMT", ""},
		{"", "50"}, {"", "12.5"}, {"", "1e9"}, {"", "NaN"}, {"", ".5"}, {"", "1.2.3"},
		{"7", "garbage"}, {" 3 ", "\t1\t"}, {"", "99999999999999999999999999999999"},
	} {
		f.Add(s[0], s[1], now.Unix())
	}
	f.Fuzz(func(t *testing.T, ra, ms string, unix int64) {
		h := http.Header{}
		h["Retry-After"] = []string{ra}
		h["Retry-After-Ms"] = []string{ms}
		now := time.Unix(unix, 0)
		d, ok := ParseRetryAfter(h, now)
		if d < 0 {
			t.Fatalf("negative %v", d)
		}
		if !ok && d != 0 {
			t.Fatalf("not ok but %v", d)
		}
		// Same input, same answer.
		if d2, ok2 := ParseRetryAfter(h, now); d2 != d || ok2 != ok {
			t.Fatal("not deterministic")
		}
		// Plain delta-seconds that fit are exact, when no valid ms header
		// takes precedence.
		if _, msOK := parseMillis(trim(ms)); !msOK {
			if n, err := strconv.ParseUint(trim(ra), 10, 64); err == nil && trim(ra)[0] != '+' {
				want := time.Duration(math.MaxInt64)
				if n <= uint64(math.MaxInt64/int64(time.Second)) {
					want = time.Duration(n) * time.Second
				}
				if !ok || d != want {
					t.Fatalf("Retry-After %q: %v, %v; want %v", ra, d, ok, want)
				}
			}
		}
		// A valid millisecond value is bounded by what it says (+1ns for
		// rounding up).
		if v, err := strconv.ParseFloat(trim(ms), 64); err == nil {
			if md, msOK := parseMillis(trim(ms)); msOK {
				if d != md {
					t.Fatalf("ms header valid but result %v != %v", d, md)
				}
				if exact := v * 1e6; exact < 9e18 && math.Abs(float64(md)-exact) > 1+exact*1e-15 {
					t.Fatalf("ms %q gave %v", ms, md)
				}
			}
		}
	})
}

func FuzzStatusClassification(f *testing.F) {
	for _, c := range []int{0, 100, 200, 204, 301, 402, 404, 408, 409, 429, 499, 500, 502, 503, 504, 529, 599, 600, -1, math.MaxInt32} {
		f.Add(c, "POST", false)
		f.Add(c, "GET", true)
	}
	f.Fuzz(func(t *testing.T, code int, method string, key bool) {
		resp := &http.Response{StatusCode: code}
		failure := DefaultIsFailure(resp)
		if failure != (code >= 500 || code == 408 || code == 429) {
			t.Fatalf("DefaultIsFailure(%d) = %v", code, failure)
		}
		if code >= 200 && code < 400 && failure {
			t.Fatalf("success status %d is a failure", code)
		}
		// A status that says "not processed" is always a failure.
		if unprocessedStatus(code) && !failure {
			t.Fatalf("%d unprocessed but not a failure", code)
		}
		req := &http.Request{Method: method, Header: http.Header{}}
		if key {
			req.Header["Idempotency-Key"] = []string{"k"}
		}
		x := &exchange{t: &Transport{}, idempotent: idempotent(req), replayable: true}
		retryable := x.mayRetry(unprocessedStatus(code))
		switch {
		case key && !retryable:
			t.Fatalf("%s with Idempotency-Key, %d: not retryable", method, code)
		case (method == "POST" || method == "PATCH") && !key && retryable != (code == 429 || code == 503 || code == 529):
			t.Fatalf("%s %d: retryable = %v", method, code, retryable)
		}
		x.replayable = false
		if x.mayRetry(true) {
			t.Fatal("retryable without a replayable body")
		}
	})
}

func trim(s string) string { return strings.Trim(s, " \t") }

// FuzzQuotaSpent checks that a body never makes a spent quota of an answer
// whose status cannot be one, that a 402 always is one, and that a 429 is
// one exactly when its kept body decodes, as encoding/json reads it, to an
// error whose type or code is insufficient_quota or billing_error.
func FuzzQuotaSpent(f *testing.F) {
	for _, s := range []string{
		`{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}`,
		`{"type":"error","error":{"type":"billing_error"}}`,
		`{"error":{"code":"rate_limit_exceeded"}}`, `{"error":{"code":`, `[1]`, ``, `{"error":null}`,
		`{"ERROR":{"CODE":"insufficient_quota"}} trailing`, `{"error":{"code":["insufficient_quota"]}}`,
	} {
		f.Add(429, s)
		f.Add(402, s)
		f.Add(503, s)
	}
	f.Fuzz(func(t *testing.T, code int, body string) {
		resp := &http.Response{StatusCode: code, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))}
		bufferBody(resp)
		got := mayBeSpent(code) && quotaSpent(resp)
		var want bool
		switch code {
		case http.StatusPaymentRequired:
			want = true
		case http.StatusTooManyRequests:
			var v struct{ Error struct{ Type, Code any } }
			if len(body) <= MaxFailureBody && json.NewDecoder(strings.NewReader(body)).Decode(&v) == nil {
				for _, x := range []any{v.Error.Type, v.Error.Code} {
					want = want || x == "insufficient_quota" || x == "billing_error"
				}
			}
		}
		if got != want {
			t.Fatalf("status %d, body %q: spent = %v, want %v", code, body, got, want)
		}
	})
}

package httppolicy_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// A 503 opens the breaker (one failure is enough) and the retry's next
// attempt is rejected before it is sent. The request was sent, so the
// caller is not told it was refused: it gets that last 503 response itself
// with a nil error, as after exhausted retries, for an idempotent request
// and for a POST (a 503 may be retried). The next request is refused
// before it is sent: that one is a rejection.
func TestRejectedAfterFailureStatusReturnsResponse(t *testing.T) {
	for _, method := range []string{"GET", "POST"} {
		t.Run(method, func(t *testing.T) {
			var hits atomic.Int32
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				io.Copy(io.Discard, r.Body)
				w.Header().Set("X-Attempt", "1")
				http.Error(w, "busy", http.StatusServiceUnavailable)
			})
			br := newBreaker(t, 1)
			var retries atomic.Int32
			tr := &httppolicy.Transport{Base: newBase(t, 2), Policy: newPipeline(t, compose.Policies{
				Retry: newRetry(t, 3, &retries), Breaker: br,
			})}
			var body io.Reader
			if method == "POST" {
				body = strings.NewReader("payload")
			}
			req, _ := http.NewRequest(method, srv.URL, body)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip error = %v; want the 503 response and a nil error", err)
			}
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Attempt") != "1" {
				t.Fatalf("status %d, X-Attempt %q; want the server's 503", resp.StatusCode, resp.Header.Get("X-Attempt"))
			}
			if got := readAll(t, resp.Body); got != "busy\n" {
				t.Fatalf("body = %q, want the 503's", got)
			}
			resp.Body.Close()
			if n, r := hits.Load(), retries.Load(); n != 1 || r != 1 {
				t.Fatalf("server hit %d times after %d retries scheduled; want 1 and 1 (the retry was rejected)", n, r)
			}
			if br.State() != breaker.Open {
				t.Fatalf("breaker %v, want open", br.State())
			}

			req, _ = http.NewRequest("GET", srv.URL, nil)
			resp, err = tr.RoundTrip(req)
			if resp != nil || !errors.Is(err, breaker.ErrOpen) || !errors.Is(err, policy.ErrRejected) {
				t.Fatalf("next request: %v, %v; want the open breaker's rejection", resp, err)
			}
			if n := hits.Load(); n != 1 {
				t.Fatalf("server hit %d times, want 1: an open breaker sends nothing", n)
			}
		})
	}
}

// A transport error opens the breaker and the retry's next attempt is
// rejected: the caller gets retry's exhaustion, which matches the transport
// error and is no rejection.
func TestRejectedAfterTransportError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errReset := errors.New("connection reset by peer")
		base := &fakeBase{fn: func(int, *http.Request) (*http.Response, error) { return nil, errReset }}
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{
			Retry: newRetry(t, 3, nil), Breaker: newBreaker(t, 1),
		})}
		req, _ := http.NewRequest("GET", "http://dep.test/", nil)
		resp, err := tr.RoundTrip(req)
		var ee *retry.ExhaustedError
		if resp != nil || errors.Is(err, policy.ErrRejected) || !errors.Is(err, errReset) || !errors.As(err, &ee) ||
			ee.Reason != retry.ReasonRejected || ee.Rejection == nil || ee.Rejection.Kind != "breaker" {
			t.Fatalf("got %v, %v; want retry's exhaustion by the breaker's rejection, matching the transport error", resp, err)
		}
		if base.count() != 1 {
			t.Fatalf("%d round trips, want 1", base.count())
		}
	})
}

package httppolicy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// streamServer writes "first", flushes, then waits for release (or the end
// of the request) and writes "second".
func streamServer(t *testing.T, release <-chan struct{}) *httptest.Server {
	t.Helper()
	return newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
			io.WriteString(w, "second")
		case <-r.Context().Done():
		}
	})
}

func TestStreamHoldsBulkheadSlot(t *testing.T) {
	tests := []struct {
		name  string
		early bool // close before EOF
	}{
		{"closed early", true},
		{"read to EOF", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			srv := streamServer(t, release)
			bh := newBulkhead(t, 2, 0)
			tr := &httppolicy.Transport{Base: newBase(t, 2), Policy: newPipeline(t, compose.Policies{Bulkhead: bh})}

			req, _ := http.NewRequest("GET", srv.URL, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := bh.Active(); got != 1 {
				t.Fatalf("Active after headers = %d, want 1", got)
			}
			buf := make([]byte, 5)
			if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first" {
				t.Fatalf("first chunk = %q, %v", buf, err)
			}
			if got := bh.Active(); got != 1 {
				t.Fatalf("Active mid-stream = %d, want 1", got)
			}
			if tt.early {
				resp.Body.Close()
			} else {
				close(release)
				if got := readAll(t, resp.Body); got != "second" {
					t.Fatalf("rest = %q", got)
				}
			}
			// The final Read or Close returns after the policy has
			// returned: the slot is free now, not eventually.
			if got := bh.Active(); got != 0 {
				t.Fatalf("Active after end of body = %d, want 0", got)
			}
			resp.Body.Close()
			if tt.early {
				close(release)
			}
		})
	}
}

// brokenServer writes part of a body and then aborts the connection.
func brokenServer(t *testing.T, hits *atomic.Int32) *httptest.Server {
	return newServer(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, "partial")
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	})
}

func TestStreamOutcomeFeedsBreaker(t *testing.T) {
	tests := []struct {
		name     string
		broken   bool
		early    bool
		wantOpen bool
	}{
		{"broken stream is a failure", true, false, true},
		{"early close is not", false, true, false},
		{"EOF is a success", false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hits atomic.Int32
			var srv *httptest.Server
			if tt.broken {
				srv = brokenServer(t, &hits)
			} else {
				srv = newServer(t, func(w http.ResponseWriter, r *http.Request) {
					hits.Add(1)
					io.WriteString(w, strings.Repeat("x", 100))
				})
			}
			br := newBreaker(t, 1)
			var retries atomic.Int32
			tr := &httppolicy.Transport{Base: newBase(t, 2), Policy: newPipeline(t, compose.Policies{
				Retry: newRetry(t, 3, &retries), Breaker: br,
			})}
			req, _ := http.NewRequest("GET", srv.URL, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if tt.early {
				resp.Body.Read(make([]byte, 1))
				resp.Body.Close()
			} else {
				_, err := io.ReadAll(resp.Body)
				if tt.broken != (err != nil) {
					t.Fatalf("ReadAll error = %v, broken = %v", err, tt.broken)
				}
				resp.Body.Close()
			}
			if got := br.State() == breaker.Open; got != tt.wantOpen {
				t.Fatalf("breaker %v, want open = %v", br.State(), tt.wantOpen)
			}
			// Nothing is retried once the response was handed over.
			if n, r := hits.Load(), retries.Load(); n != 1 || r != 0 {
				t.Fatalf("server hit %d times after %d retries, want 1 and 0", n, r)
			}
			if tt.wantOpen {
				_, err := tr.RoundTrip(req)
				if !errors.Is(err, breaker.ErrOpen) {
					t.Fatalf("next call: %v, want breaker.ErrOpen", err)
				}
			}
		})
	}
}

func TestRetry503Then200(t *testing.T) {
	var hits atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	tr := &httppolicy.Transport{Base: newBase(t, 2), Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)})}
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || readAll(t, resp.Body) != "ok" || hits.Load() != 2 {
		t.Fatalf("status %d after %d hits", resp.StatusCode, hits.Load())
	}
}

func TestLastBadResponseReturned(t *testing.T) {
	var hits atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := hits.Add(1)
		w.Header().Set("X-Attempt", strconv.Itoa(int(n)))
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprintf(w, "attempt %d", n)
	})
	tr := &httppolicy.Transport{Base: newBase(t, 2), Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)})}
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("err = %v, want the last response", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("X-Attempt") != "3" {
		t.Fatalf("got %d, attempt %s", resp.StatusCode, resp.Header.Get("X-Attempt"))
	}
	if got := readAll(t, resp.Body); got != "attempt 3" {
		t.Fatalf("body = %q", got)
	}
}

func TestRetryAfterMs(t *testing.T) {
	var hits atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.Header().Set("Retry-After-Ms", "50")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "ok")
	})
	var waits []time.Duration
	rt, err := retry.New(retry.Config{
		MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: time.Second, Jitter: -1,
		OnRetry: func(_ context.Context, _ int, _ error, wait time.Duration) { waits = append(waits, wait) },
	})
	if err != nil {
		t.Fatal(err)
	}
	tr := &httppolicy.Transport{Base: newBase(t, 2), Policy: newPipeline(t, compose.Policies{Retry: rt})}
	start := time.Now()
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x")) // 429 is retried even for POST
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || len(waits) != 1 || waits[0] != 50*time.Millisecond {
		t.Fatalf("status %d, waits %v; want 200 after one wait of 50ms", resp.StatusCode, waits)
	}
	if el := time.Since(start); el < 50*time.Millisecond || el > 5*time.Second {
		t.Fatalf("took %v", el)
	}
}

// TestRetryAfterHonoured runs on a fake base transport inside a synctest
// bubble, where time is exact.
func TestRetryAfterHonoured(t *testing.T) {
	tests := []struct {
		name       string
		header     func(now time.Time) (string, string)
		deadline   time.Duration // 0: none
		wantStatus int
		wantHits   int
		wantTime   time.Duration
	}{
		{"delta-seconds", func(time.Time) (string, string) { return "Retry-After", "2" }, 0, 200, 2, 2 * time.Second},
		{"HTTP-date", func(now time.Time) (string, string) {
			return "Retry-After", now.Add(3 * time.Second).UTC().Format(http.TimeFormat)
		}, 0, 200, 2, 3 * time.Second},
		{"milliseconds", func(time.Time) (string, string) { return "Retry-After-Ms", "1500" }, 0, 200, 2, 1500 * time.Millisecond},
		{"longer than MaxInterval ends retries", func(time.Time) (string, string) { return "Retry-After", "3600" }, 0, 503, 1, 0},
		{"past the deadline ends retries", func(time.Time) (string, string) { return "Retry-After", "5" }, 2 * time.Second, 503, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &fakeBase{fn: func(n int, _ *http.Request) (*http.Response, error) {
					if n == 1 {
						k, v := tt.header(time.Now())
						return response(503, "busy", k, v), nil
					}
					return response(200, "ok"), nil
				}}
				p := compose.Policies{Retry: newRetry(t, 3, nil)}
				if tt.deadline > 0 {
					p.Deadline = newDeadline(t, tt.deadline)
				}
				tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, p)}
				start := time.Now()
				req, _ := http.NewRequest("GET", "http://dep.test/", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tt.wantStatus || base.count() != tt.wantHits {
					t.Fatalf("status %d after %d hits, want %d after %d", resp.StatusCode, base.count(), tt.wantStatus, tt.wantHits)
				}
				if el := time.Since(start); el != tt.wantTime {
					t.Fatalf("took %v, want %v", el, tt.wantTime)
				}
			})
		})
	}
}

func TestRetryRulesByMethod(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		status   int
		header   string
		unsafe   bool
		wantHits int32
	}{
		{"POST 500 not retried", "POST", 500, "", false, 1},
		{"POST 502 not retried", "POST", 502, "", false, 1},
		{"POST 503 retried", "POST", 503, "", false, 3},
		{"POST 429 retried", "POST", 429, "", false, 3},
		{"PATCH 500 not retried", "PATCH", 500, "", false, 1},
		{"POST with Idempotency-Key retried", "POST", 500, "Idempotency-Key", false, 3},
		{"POST with X-Idempotency-Key retried", "POST", 500, "X-Idempotency-Key", false, 3},
		{"POST with RetryUnsafe retried", "POST", 500, "", true, 3},
		{"PUT 500 retried, body replayed", "PUT", 500, "", false, 3},
		{"DELETE 408 retried", "DELETE", 408, "", false, 3},
		{"GET 500 retried", "GET", 500, "", false, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hits atomic.Int32
			var mu sync.Mutex
			var bodies []string
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				bodies = append(bodies, string(b))
				mu.Unlock()
				w.WriteHeader(tt.status)
			})
			tr := &httppolicy.Transport{Base: newBase(t, 2), RetryUnsafe: tt.unsafe,
				Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)})}
			var body io.Reader
			if tt.method != "GET" && tt.method != "DELETE" {
				body = strings.NewReader("payload")
			}
			req, _ := http.NewRequest(tt.method, srv.URL, body)
			if tt.header != "" {
				req.Header[tt.header] = []string{"k1"}
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status || hits.Load() != tt.wantHits {
				t.Fatalf("status %d after %d hits, want %d after %d", resp.StatusCode, hits.Load(), tt.status, tt.wantHits)
			}
			if body != nil {
				for i, b := range bodies {
					if b != "payload" {
						t.Fatalf("attempt %d sent body %q", i+1, b)
					}
				}
			}
		})
	}
}

func TestNoGetBodyNoRetry(t *testing.T) {
	var hits atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(500)
	})
	tr := &httppolicy.Transport{Base: newBase(t, 2), Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)})}
	req, _ := http.NewRequest("PUT", srv.URL, io.NopCloser(strings.NewReader("payload")))
	if req.GetBody != nil {
		t.Fatal("test needs a request without GetBody")
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 500 || hits.Load() != 1 {
		t.Fatalf("status %d after %d hits, want 500 after 1", resp.StatusCode, hits.Load())
	}
}

// refusedURL returns the URL of a port nothing listens on.
func refusedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/"
}

func TestTransportErrorRules(t *testing.T) {
	t.Run("POST refused is retried", func(t *testing.T) {
		var retries atomic.Int32
		tr := &httppolicy.Transport{Base: newBase(t, 2), Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, &retries)})}
		req, _ := http.NewRequest("POST", refusedURL(t), strings.NewReader("x"))
		_, err := tr.RoundTrip(req)
		if !errors.Is(err, retry.ErrExhausted) || !errors.Is(err, syscall.ECONNREFUSED) || retries.Load() != 2 {
			t.Fatalf("err = %v after %d retries; want exhausted after 2", err, retries.Load())
		}
	})
	t.Run("POST cut after sending is not", func(t *testing.T) {
		var hits, retries atomic.Int32
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			io.Copy(io.Discard, r.Body)
			panic(http.ErrAbortHandler) // no response at all
		})
		tr := &httppolicy.Transport{Base: newBase(t, 2), Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, &retries)})}
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
		_, err := tr.RoundTrip(req)
		if err == nil || errors.Is(err, retry.ErrExhausted) || retries.Load() != 0 || hits.Load() != 1 {
			t.Fatalf("err = %v after %d retries, %d hits; want the transport error at once", err, retries.Load(), hits.Load())
		}
	})
	t.Run("GET transport error is retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			boom := errors.New("boom")
			base := &fakeBase{fn: func(int, *http.Request) (*http.Response, error) { return nil, boom }}
			tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)})}
			req, _ := http.NewRequest("GET", "http://dep.test/", nil)
			_, err := tr.RoundTrip(req)
			if !errors.Is(err, retry.ErrExhausted) || !errors.Is(err, boom) || base.count() != 3 {
				t.Fatalf("err = %v after %d attempts", err, base.count())
			}
		})
	})
	t.Run("GetBody error ends the call", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			bad := errors.New("cannot rewind")
			base := &fakeBase{fn: func(int, *http.Request) (*http.Response, error) { return response(500, ""), nil }}
			tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)})}
			req, _ := http.NewRequest("PUT", "http://dep.test/", strings.NewReader("x"))
			req.GetBody = func() (io.ReadCloser, error) { return nil, bad }
			_, err := tr.RoundTrip(req)
			if !errors.Is(err, bad) || base.count() != 1 {
				t.Fatalf("err = %v after %d attempts", err, base.count())
			}
		})
	})
}

func TestCtxCancelMidStreamFreesSlot(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		for {
			if _, err := io.WriteString(w, "chunk"); err != nil {
				return
			}
			rc.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	bh := newBulkhead(t, 1, 0)
	tr := &httppolicy.Transport{Base: newBase(t, 1), Policy: newPipeline(t, compose.Policies{Bulkhead: bh})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadFull(resp.Body, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	if bh.Active() != 1 {
		t.Fatal("slot not held mid-stream")
	}
	cancel()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("ReadAll after cancel succeeded")
	}
	if got := bh.Active(); got != 0 {
		t.Fatalf("Active after cancel = %d, want 0", got)
	}
}

func TestDeadlineBoundsStream(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first")
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	bh := newBulkhead(t, 1, 0)
	br := newBreaker(t, 1)
	tr := &httppolicy.Transport{Base: newBase(t, 1), Policy: newPipeline(t, compose.Policies{
		Bulkhead: bh, Deadline: newDeadline(t, 50*time.Millisecond), Breaker: br,
	})}
	t.Run("read", func(t *testing.T) {
		start := time.Now()
		req, _ := http.NewRequest("GET", srv.URL, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		if err == nil {
			t.Fatal("stream outlived the deadline")
		}
		if el := time.Since(start); el < 50*time.Millisecond || el > 5*time.Second {
			t.Fatalf("stream ended after %v", el)
		}
		if bh.Active() != 0 || br.State() != breaker.Open {
			t.Fatalf("Active %d, breaker %v; want 0, open (a timeout is a failure)", bh.Active(), br.State())
		}
	})
	t.Run("body never read nor closed", func(t *testing.T) {
		br.Reset()
		req, _ := http.NewRequest("GET", srv.URL, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if bh.Active() != 1 {
			t.Fatal("slot not held")
		}
		// The slot is held until the deadline frees it.
		waitFor(t, "the deadline to free the slot", func() bool { return bh.Active() == 0 })
	})
}

func TestRejection(t *testing.T) {
	release := make(chan struct{})
	srv := streamServer(t, release)
	defer close(release)
	bh := newBulkhead(t, 1, 0)
	tr := &httppolicy.Transport{Base: newBase(t, 1), Policy: newPipeline(t, compose.Policies{Bulkhead: bh})}
	req, _ := http.NewRequest("GET", srv.URL, nil)
	held, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Body.Close()

	body := newTrackBody("payload")
	req2, _ := http.NewRequest("POST", srv.URL, body)
	resp, err := tr.RoundTrip(req2)
	if resp != nil || !errors.Is(err, bulkhead.ErrFull) || !errors.Is(err, policy.ErrRejected) {
		t.Fatalf("got %v, %v; want a bulkhead rejection", resp, err)
	}
	if !body.closed.Load() {
		t.Fatal("request body of a rejected call not closed")
	}
}

func TestNilPolicy(t *testing.T) {
	body := newTrackBody("x")
	req, _ := http.NewRequest("POST", "http://dep.test/", body)
	resp, err := (&httppolicy.Transport{}).RoundTrip(req)
	if resp != nil || err == nil || !strings.Contains(err.Error(), "Policy") {
		t.Fatalf("got %v, %v", resp, err)
	}
	if !body.closed.Load() {
		t.Fatal("request body not closed")
	}
}

func TestResponseWithoutBodyFreesSlotAtOnce(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X", "y")
		w.WriteHeader(http.StatusNoContent)
	})
	bh := newBulkhead(t, 1, 0)
	tr := &httppolicy.Transport{Base: newBase(t, 1), Policy: newPipeline(t, compose.Policies{Bulkhead: bh})}
	for _, method := range []string{"HEAD", "GET"} {
		req, _ := http.NewRequest(method, srv.URL, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get("X") != "y" {
			t.Fatalf("%s: header missing", method)
		}
		if got := bh.Active(); got != 0 {
			t.Fatalf("%s: Active = %d with no body to read, want 0", method, got)
		}
		resp.Body.Close()
	}
}

func TestFailureBodiesDrainedAndClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var base *fakeBase
		base = &fakeBase{fn: func(n int, _ *http.Request) (*http.Response, error) {
			base.mu.Lock()
			defer base.mu.Unlock()
			for i, b := range base.bodies {
				if !b.closed.Load() || !b.eof.Load() {
					t.Errorf("attempt %d: body of attempt %d not drained and closed", n, i+1)
				}
			}
			return response(503, fmt.Sprintf("attempt %d", n)), nil
		}}
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)})}
		req, _ := http.NewRequest("GET", "http://dep.test/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp.Body); got != "attempt 3" {
			t.Fatalf("body = %q", got)
		}
		resp.Body.Close()
		for i, b := range base.bodies {
			if !b.closed.Load() {
				t.Errorf("body %d not closed", i+1)
			}
		}
	})
}

func TestRejectedAfterFailureStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &fakeBase{fn: func(int, *http.Request) (*http.Response, error) { return response(503, "busy"), nil }}
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{
			Retry: newRetry(t, 3, nil), Breaker: newBreaker(t, 1),
		})}
		req, _ := http.NewRequest("GET", "http://dep.test/", nil)
		resp, err := tr.RoundTrip(req)
		// The request was sent: the caller gets the 503, not the rejection
		// of the retry that followed (see rejected_test.go).
		if err != nil || resp == nil || resp.StatusCode != 503 || readAll(t, resp.Body) != "busy" {
			t.Fatalf("got %v, %v; want the 503 response and a nil error", resp, err)
		}
		resp.Body.Close()
		if base.count() != 1 || !base.bodies[0].closed.Load() {
			t.Fatal("the failure response was not sent once and its original body closed")
		}
	})
}

func TestFailureBodyTruncated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		big := strings.Repeat("x", httppolicy.MaxFailureBody+10)
		base := &fakeBase{fn: func(int, *http.Request) (*http.Response, error) { return response(500, big), nil }}
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{})}
		req, _ := http.NewRequest("GET", "http://dep.test/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		if len(b) != httppolicy.MaxFailureBody || !errors.Is(err, httppolicy.ErrBodyTruncated) {
			t.Fatalf("read %d bytes, %v", len(b), err)
		}
	})
}

func TestCustomIsFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &fakeBase{fn: func(n int, _ *http.Request) (*http.Response, error) {
			if n == 1 {
				return response(404, "not yet"), nil
			}
			return response(200, "ok"), nil
		}}
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)}),
			IsFailure: func(r *http.Response) bool { return r.StatusCode == 404 }}
		req, _ := http.NewRequest("GET", "http://dep.test/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil || resp.StatusCode != 200 || base.count() != 2 {
			t.Fatalf("got %v, %v after %d attempts", resp, err, base.count())
		}
		resp.Body.Close()
	})
}

func TestStatusErrorSeenByPolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &fakeBase{fn: func(int, *http.Request) (*http.Response, error) {
			return response(503, "busy", "Retry-After", "1"), nil
		}}
		var seen *httppolicy.StatusError
		rt, _ := retry.New(retry.Config{MaxAttempts: 2, OnRetry: func(_ context.Context, _ int, err error, _ time.Duration) {
			seen, _ = errors.AsType[*httppolicy.StatusError](err)
		}})
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Retry: rt})}
		req, _ := http.NewRequest("GET", "http://dep.test/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if seen == nil || seen.StatusCode != 503 || seen.RetryAfter() != time.Second || seen.Response == nil {
			t.Fatalf("retry saw %+v", seen)
		}
	})
}

func TestCallerCancelDuringWaitGetsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &fakeBase{fn: func(int, *http.Request) (*http.Response, error) {
			return response(503, "busy", "Retry-After", "2"), nil
		}}
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)})}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(time.Second, cancel) // during the 2s wait
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://dep.test/", nil)
		resp, err := tr.RoundTrip(req)
		if resp != nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, %v; want the caller's ctx error", resp, err)
		}
		if !base.bodies[0].closed.Load() {
			t.Fatal("failure response not closed")
		}
	})
}

// plainPolicy is a user-written policy that is neither a Stage nor a
// Repeater: it just calls fn.
type plainPolicy struct{ calls atomic.Int32 }

func (p *plainPolicy) Execute(ctx context.Context, fn policy.Func) error {
	p.calls.Add(1)
	return fn(ctx)
}

// noRunPolicy returns nil without calling fn.
type noRunPolicy struct{}

func (noRunPolicy) Execute(context.Context, policy.Func) error { return nil }

// againPolicy calls fn a second time whatever it returned.
type againPolicy struct{ second error }

func (p *againPolicy) Execute(ctx context.Context, fn policy.Func) error {
	fn(ctx)
	p.second = fn(ctx)
	return nil
}

func TestUserPolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &fakeBase{fn: func(int, *http.Request) (*http.Response, error) { return response(204, ""), nil }}
		pp := &plainPolicy{}
		req, _ := http.NewRequest("GET", "http://dep.test/", nil)
		resp, err := (&httppolicy.Transport{Base: base, Policy: pp}).RoundTrip(req)
		if err != nil || resp.StatusCode != 204 || pp.calls.Load() != 1 {
			t.Fatalf("plain policy: %v, %v", resp, err)
		}
		resp.Body.Close()

		body := newTrackBody("x")
		req, _ = http.NewRequest("POST", "http://dep.test/", body)
		resp, err = (&httppolicy.Transport{Base: base, Policy: noRunPolicy{}}).RoundTrip(req)
		if resp != nil || err == nil || !body.closed.Load() {
			t.Fatalf("policy that never runs fn: %v, %v, body closed %v", resp, err, body.closed.Load())
		}

		ap := &againPolicy{}
		req, _ = http.NewRequest("GET", "http://dep.test/", nil)
		n := base.count()
		resp, err = (&httppolicy.Transport{Base: base, Policy: ap}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close() // returns once Execute has
		if ap.second == nil || base.count() != n+1 {
			t.Fatalf("fn called after acceptance: second %v, %d sends", ap.second, base.count()-n)
		}
	})
}

// keptFnPolicy runs fn once and keeps it, for a call after Execute
// returned.
type keptFnPolicy struct{ fn policy.Func }

func (p *keptFnPolicy) Execute(ctx context.Context, fn policy.Func) error {
	p.fn = fn
	return fn(ctx)
}

// A policy that calls fn after its Execute returned gets the attempt
// refused, and nothing is sent: the context's error once it is done,
// else an error saying the exchange is over.
func TestTransportRefusesAttemptsAfterExecuteReturned(t *testing.T) {
	base := &fakeBase{fn: func(int, *http.Request) (*http.Response, error) { return response(204, ""), nil }}
	kp := &keptFnPolicy{}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://dep.test/", nil)
	resp, err := (&httppolicy.Transport{Base: base, Policy: kp}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := kp.fn(ctx); err == nil || !strings.Contains(err.Error(), "is over") {
		t.Fatalf("fn after Execute returned: %v, want the exchange over", err)
	}
	cancel()
	if err := kp.fn(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("fn after Execute returned, context done: %v, want context.Canceled", err)
	}
	if n := base.count(); n != 1 {
		t.Fatalf("%d requests sent, want 1", n)
	}
}

// earlyReturnPolicy runs fn on a goroutine of its own and returns once
// fn has sent its request, without waiting for fn to return.
type earlyReturnPolicy struct{ sent chan struct{} }

func (p earlyReturnPolicy) Execute(ctx context.Context, fn policy.Func) error {
	go fn(ctx)
	<-p.sent
	return nil
}

// A policy that returns before its attempt does (it should have waited)
// gets the attempt's outcome all the same: the Transport waits for the
// running attempt before it reads what the attempt left.
// Real time: the Transport waits on a mutex, which synctest's clock does
// not count as blocked.
func TestTransportWaitsForAnAttemptThePolicyLeftRunning(t *testing.T) {
	sent := make(chan struct{})
	base := &fakeBase{fn: func(int, *http.Request) (*http.Response, error) {
		close(sent)
		time.Sleep(20 * time.Millisecond)
		return response(200, "hello"), nil
	}}
	req, _ := http.NewRequest("GET", "http://dep.test/", nil)
	resp, err := (&httppolicy.Transport{Base: base, Policy: earlyReturnPolicy{sent}}).RoundTrip(req)
	if err != nil {
		t.Fatalf("RoundTrip: %v, want the attempt's response", err)
	}
	if got := readAll(t, resp.Body); got != "hello" {
		t.Fatalf("body %q", got)
	}
	resp.Body.Close()
}

// panicBase panics in RoundTrip.
type panicBase struct{}

func (panicBase) RoundTrip(*http.Request) (*http.Response, error) { panic("base exploded") }

func TestPanicInBaseReachesCaller(t *testing.T) {
	bh := newBulkhead(t, 1, 0)
	tr := &httppolicy.Transport{Base: panicBase{}, Policy: newPipeline(t, compose.Policies{Bulkhead: bh})}
	req, _ := http.NewRequest("GET", "http://dep.test/", nil)
	func() {
		defer func() {
			if v := recover(); v != "base exploded" {
				t.Fatalf("recovered %v", v)
			}
		}()
		tr.RoundTrip(req)
		t.Fatal("no panic")
	}()
	if bh.Active() != 0 {
		t.Fatal("panic leaked the slot")
	}
}

func TestWithHTTPClient(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	bh := newBulkhead(t, 1, 0)
	client := &http.Client{Transport: &httppolicy.Transport{Base: newBase(t, 1), Policy: newPipeline(t, compose.Policies{
		Bulkhead: bh, Deadline: newDeadline(t, 5*time.Second), Retry: newRetry(t, 3, nil), Breaker: newBreaker(t, 5),
		Attempt: newDeadline(t, 2*time.Second),
	})}}
	for range 3 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp.Body); got != "hello" {
			t.Fatalf("body %q", got)
		}
		resp.Body.Close()
		if bh.Active() != 0 {
			t.Fatal("slot held after the body ended")
		}
	}
}

func TestSwitchingProtocolsBodyIsWritable(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(brw, buf); err == nil {
			conn.Write(buf) // echo once, then close
		}
	})
	bh := newBulkhead(t, 1, 0)
	tr := &httppolicy.Transport{Base: newBase(t, 1), Policy: newPipeline(t, compose.Policies{Bulkhead: bh})}
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != 101 || !ok {
		t.Fatalf("status %d, writable %v", resp.StatusCode, ok)
	}
	if _, err := rw.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, rw); got != "ping" {
		t.Fatalf("echo %q", got)
	}
	if bh.Active() != 0 {
		t.Fatal("slot held after the switched connection ended")
	}
}

func namedDeadline(t testing.TB, name string, d time.Duration) *deadline.Deadline {
	t.Helper()
	dl, err := deadline.New(deadline.Config{Name: name, Timeout: d})
	if err != nil {
		t.Fatal(err)
	}
	return dl
}

// TestStreamDeadlineError checks that a deadline gives the same error
// whether it fires while RoundTrip waits for the headers or while the
// caller reads the body, and that the caller's own cancellation is still
// reported as such.
func TestStreamDeadlineError(t *testing.T) {
	const short = 50 * time.Millisecond
	tests := []struct {
		name     string
		policies func(t *testing.T) compose.Policies
		cancel   bool   // the caller cancels instead
		wantName string // the Deadline that fired
	}{
		{"whole-call Deadline", func(t *testing.T) compose.Policies {
			return compose.Policies{Deadline: namedDeadline(t, "call", short)}
		}, false, "call"},
		{"Attempt deadline", func(t *testing.T) compose.Policies {
			return compose.Policies{Attempt: namedDeadline(t, "attempt", short)}
		}, false, "attempt"},
		{"Deadline in a full pipeline", func(t *testing.T) compose.Policies {
			return compose.Policies{
				Bulkhead: newBulkhead(t, 1, 0), Deadline: namedDeadline(t, "call", short), Retry: newRetry(t, 2, nil),
				Breaker: newBreaker(t, 5),
			}
		}, false, "call"},
		{"Attempt deadline in a full pipeline", func(t *testing.T) compose.Policies {
			return compose.Policies{
				Bulkhead: newBulkhead(t, 1, 0), Deadline: namedDeadline(t, "call", time.Minute), Retry: newRetry(t, 2, nil),
				Breaker: newBreaker(t, 5), Attempt: namedDeadline(t, "attempt", short),
			}
		}, false, "attempt"},
		{"caller's cancellation", func(t *testing.T) compose.Policies {
			return compose.Policies{Deadline: namedDeadline(t, "call", time.Minute), Attempt: namedDeadline(t, "attempt", time.Minute)}
		}, true, ""},
	}
	for _, phase := range []string{"headers", "body"} {
		for _, tt := range tests {
			t.Run(phase+"/"+tt.name, func(t *testing.T) {
				// The server hangs before the headers, or after sending
				// some of the body, until the client goes away or the
				// test ends.
				block := make(chan struct{})
				srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
					if phase == "body" {
						io.WriteString(w, "first")
						http.NewResponseController(w).Flush()
					}
					select {
					case <-r.Context().Done():
					case <-block:
					}
				})
				t.Cleanup(func() { close(block) }) // runs before srv.Close
				p := tt.policies(t)
				tr := &httppolicy.Transport{Base: newBase(t, 1), Policy: newPipeline(t, p)}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
				if tt.cancel && phase == "headers" {
					// Cancel once the request is in the server's hands.
					time.AfterFunc(short, cancel)
				}
				resp, err := tr.RoundTrip(req)
				if phase == "body" {
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					if _, err := io.ReadFull(resp.Body, make([]byte, 5)); err != nil {
						t.Fatal(err)
					}
					if tt.cancel {
						cancel()
					}
					_, err = io.ReadAll(resp.Body)
				} else if resp != nil {
					resp.Body.Close()
				}
				if tt.cancel {
					if !errors.Is(err, context.Canceled) || errors.Is(err, deadline.ErrExceeded) || errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("got %v (%T), want context.Canceled and no deadline", err, err)
					}
				} else {
					ee, ok := errors.AsType[*deadline.ExceededError](err)
					if !errors.Is(err, deadline.ErrExceeded) || !errors.Is(err, context.DeadlineExceeded) || !ok || ee.Name != tt.wantName {
						t.Fatalf("got %v (%T), want a *deadline.ExceededError of %q", err, err, tt.wantName)
					}
				}
				if bh, ok := p.Bulkhead.(*bulkhead.Bulkhead); ok && bh.Active() != 0 {
					t.Fatalf("Active = %d after the error, want 0", bh.Active())
				}
			})
		}
	}
}

// TestBaseNilResponseNilError checks a broken base RoundTripper, one that
// returns neither a response nor an error: the attempt fails (as
// http.Client would report it), is not retried, counts for a breaker, and
// frees what the call held.
func TestBaseNilResponseNilError(t *testing.T) {
	tests := []struct {
		name  string
		p     func(t *testing.T) (compose.Policies, func(t *testing.T))
		sends int // base round trips for the two requests
	}{
		{"bulkhead slot freed", func(t *testing.T) (compose.Policies, func(t *testing.T)) {
			bh := newBulkhead(t, 1, 0)
			return compose.Policies{Bulkhead: bh}, func(t *testing.T) {
				if bh.Active() != 0 {
					t.Fatalf("Active = %d", bh.Active())
				}
			}
		}, 2},
		{"not retried", func(t *testing.T) (compose.Policies, func(t *testing.T)) {
			return compose.Policies{Bulkhead: newBulkhead(t, 1, 0), Retry: newRetry(t, 3, nil)}, nil
		}, 2},
		{"counted by a breaker", func(t *testing.T) (compose.Policies, func(t *testing.T)) {
			br := newBreaker(t, 1)
			return compose.Policies{Breaker: br}, func(t *testing.T) {
				if br.State() != breaker.Open {
					t.Fatalf("breaker %v, want open", br.State())
				}
			}
		}, 1}, // the second request is rejected by the open breaker
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sends atomic.Int32
				// The first round trip is broken, and leaves the request
				// body unclosed as well; the next ones answer 204.
				base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
					if sends.Add(1) == 1 {
						return nil, nil
					}
					if req.Body != nil {
						req.Body.Close()
					}
					return response(http.StatusNoContent, ""), nil
				})
				p, check := tt.p(t)
				tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, p)}
				body := newTrackBody("payload")
				req, _ := http.NewRequest("PUT", "http://dep.test/", body)
				req.GetBody = func() (io.ReadCloser, error) { return newTrackBody("payload"), nil }
				resp, err := tr.RoundTrip(req)
				want := "httppolicy: Transport.Base (httppolicy_test.roundTripFunc) returned a nil *http.Response with a nil error"
				if resp != nil || err == nil || err.Error() != want {
					t.Fatalf("got %v, %v; want the error %q", resp, err, want)
				}
				if !body.closed.Load() {
					t.Fatal("request body not closed")
				}
				if check != nil {
					check(t)
				}
				req, _ = http.NewRequest("GET", "http://dep.test/", nil)
				if resp, err := tr.RoundTrip(req); err == nil {
					resp.Body.Close()
				} else if !errors.Is(err, policy.ErrRejected) {
					t.Fatalf("second request: %v", err)
				}
				if got := sends.Load(); got != int32(tt.sends) {
					t.Fatalf("%d round trips, want %d", got, tt.sends)
				}
			})
		})
	}
}

// leasePolicy is a policy of another package that holds a lease while
// its fn runs, as redisstate's Budget does.
type leasePolicy struct{ held atomic.Int32 }

func (l *leasePolicy) Execute(ctx context.Context, fn policy.Func) error {
	l.held.Add(1)
	defer l.held.Add(-1)
	return fn(ctx)
}

// A policy of another package holds its lease through the body handed
// over, as the built-in policies hold theirs: every request runs through
// one path.
func TestPolicyOfAnotherPackageHoldsThroughTheBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "text/event-stream", false, step{0, "data: 1\n\n"}, step{time.Second, "data: 2\n\n"})
			return resp, b, nil
		}}
		l := &leasePolicy{}
		resp, err := get(t, &httppolicy.Transport{Base: base, Policy: l}, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n := l.held.Load(); n != 1 {
			t.Fatalf("lease held %d times while the body is read; want 1", n)
		}
		readAll(t, resp.Body)
		resp.Body.Close()
		synctest.Wait()
		if n := l.held.Load(); n != 0 {
			t.Fatalf("lease held %d times after the body ended; want 0", n)
		}
	})
}

// funcPolicy is a policy of another package written as a func type, as
// http.HandlerFunc is to http.Handler: its values are not comparable.
type funcPolicy func(ctx context.Context, fn policy.Func) error

func (f funcPolicy) Execute(ctx context.Context, fn policy.Func) error { return f(ctx, fn) }

// slicePolicy is a policy of another package holding a slice.
type slicePolicy struct{ tags []string }

func (slicePolicy) Execute(ctx context.Context, fn policy.Func) error { return fn(ctx) }

// A Policy of an uncomparable type serves every request, not the first
// alone.
func TestTransportWithAnUncomparablePolicy(t *testing.T) {
	for name, p := range map[string]policy.Policy{
		"func":  funcPolicy(func(ctx context.Context, fn policy.Func) error { return fn(ctx) }),
		"slice": slicePolicy{tags: []string{"a"}},
	} {
		base := &fakeBase{fn: func(int, *http.Request) (*http.Response, error) { return response(200, "hello"), nil }}
		tr := &httppolicy.Transport{Base: base, Policy: p}
		for i := range 2 {
			resp, err := get(t, tr, context.Background())
			if err != nil {
				t.Fatalf("%s: request %d: %v", name, i, err)
			}
			readAll(t, resp.Body)
			resp.Body.Close()
		}
	}
}

package httppolicy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/retry"
)

func newBulkhead(t testing.TB, limit, queue int) *bulkhead.Bulkhead {
	t.Helper()
	b, err := bulkhead.New(bulkhead.Config{Name: "dep", Limit: limit, MaxQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func newBreaker(t testing.TB, failures uint32) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(breaker.Config{Name: "dep", ConsecutiveFailures: failures, OpenTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func newDeadline(t testing.TB, d time.Duration) *deadline.Deadline {
	t.Helper()
	dl, err := deadline.New(deadline.Config{Name: "dep", Timeout: d})
	if err != nil {
		t.Fatal(err)
	}
	return dl
}

// newRetry returns a retry with exact, short waits; retries counts them.
func newRetry(t testing.TB, attempts int, retries *atomic.Int32) *retry.Retry {
	t.Helper()
	cfg := retry.Config{
		Name: "dep", MaxAttempts: attempts,
		InitialInterval: time.Millisecond, MaxInterval: 10 * time.Second, Jitter: -1,
	}
	if retries != nil {
		cfg.OnRetry = func(_ context.Context, _ int, _ error, _ time.Duration) { retries.Add(1) }
	}
	r, err := retry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newPipeline(t testing.TB, p compose.Policies) *compose.Pipeline {
	t.Helper()
	pl, err := compose.New("dep", p)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// newServer starts an httptest server closed at the end of the test.
func newServer(t testing.TB, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// newBase returns a real base transport whose idle connections are closed
// at the end of the test (goleak).
func newBase(t testing.TB, limit int) *http.Transport {
	t.Helper()
	tr := httppolicy.NewDependencyTransport(limit)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func readAll(t testing.TB, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

// waitFor polls cond with short real sleeps (for httptest servers, which
// cannot run in a synctest bubble), failing after a generous bound.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// trackBody is a body that records reads and closes.
type trackBody struct {
	r      io.Reader
	closed atomic.Bool
	eof    atomic.Bool
}

func newTrackBody(s string) *trackBody { return &trackBody{r: strings.NewReader(s)} }

func (b *trackBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errors.New("read after close")
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

func (b *trackBody) Close() error { b.closed.Store(true); return nil }

// fakeBase is a base RoundTripper run by a function; it records every
// request and every response body it returned. It needs no network, so it
// runs inside synctest bubbles.
type fakeBase struct {
	mu     sync.Mutex
	fn     func(n int, req *http.Request) (*http.Response, error)
	reqs   []*http.Request
	bodies []*trackBody
}

func (f *fakeBase) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	n := len(f.reqs)
	f.mu.Unlock()
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	resp, err := f.fn(n, req)
	if resp != nil {
		if tb, ok := resp.Body.(*trackBody); ok {
			f.mu.Lock()
			f.bodies = append(f.bodies, tb)
			f.mu.Unlock()
		}
		resp.Request = req
	}
	return resp, err
}

func (f *fakeBase) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

// response builds a response with status code, body and header pairs.
func response(code int, body string, kv ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return &http.Response{
		StatusCode: code, Status: http.StatusText(code), Header: h,
		Body: newTrackBody(body), ContentLength: int64(len(body)),
		ProtoMajor: 1, ProtoMinor: 1,
	}
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

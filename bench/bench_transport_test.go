package bench

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	fsbulkhead "github.com/failsafe-go/failsafe-go/bulkhead"
	fsbreaker "github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/retry"
)

// The Transport's own cost: a keep-alive GET over loopback to a server
// that answers "hello", sent four ways in the same run, for
// `benchstat -col /lib`:
//
//	lib=bare        the base http.Transport alone
//	lib=watertight  httppolicy.Transport over the same kind of base, with
//	                the README's quick-start pipeline and both stream
//	                timeouts set
//	lib=empty       httppolicy.Transport with an empty pipeline and both
//	                stream timeouts set: the Transport without policies
//	lib=failsafe    failsafe-go's failsafehttp round tripper with the same
//	                policies (bulkhead 10 with a 1 s wait, timeout 30 s,
//	                retry 3, breaker, attempt timeout 10 s)
//	lib=floor       the base http.Transport with only the contexts and the
//	                timer that lib=watertight's request carries (see
//	                floorRT), and no policy: what net/http's handling of
//	                those standard library contexts costs on its own
//
// BenchmarkTransportExecute is the quick-start pipeline's own Execute
// cost, with a no-op fn: the target is watertight - bare <= Execute + 3 us.
// BenchmarkTransportMem sends the same four ways to a base that answers
// from memory, which leaves the Transport's own cost without the noise of
// the network and of net/http's goroutines.

// quickStart is the README's quick-start pipeline.
func quickStart(tb testing.TB) *watertight.Pipeline {
	p, err := watertight.New("llm", watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 10, MaxQueue: 20, MaxWait: time.Second},
		Deadline: &deadline.Config{Timeout: 30 * time.Second},
		Retry:    &retry.Config{MaxAttempts: 3},
		Breaker:  &breaker.Config{},
		Attempt:  &deadline.Config{Timeout: 10 * time.Second},
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// fsQuickStart is the same pipeline in failsafe-go, outermost first.
func fsQuickStart() []failsafe.Policy[*http.Response] {
	return []failsafe.Policy[*http.Response]{
		fsbulkhead.NewBuilder[*http.Response](10).WithMaxWaitTime(time.Second).Build(),
		fstimeout.New[*http.Response](30 * time.Second),
		failsafehttp.NewRetryPolicyBuilder().WithMaxAttempts(3).Build(),
		fsbreaker.NewBuilder[*http.Response]().WithFailureThreshold(breakerFailures).WithDelay(breakerOpen).Build(),
		fstimeout.New[*http.Response](10 * time.Second),
	}
}

// helloServer answers every request with "hello"; it and the idle
// connections of the bases it is used with close at cleanup (goleak).
func helloServer(tb testing.TB) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	}))
	tb.Cleanup(srv.Close)
	return srv
}

func loopbackBase(tb testing.TB) *http.Transport {
	base := httppolicy.NewDependencyTransport(10)
	tb.Cleanup(base.CloseIdleConnections)
	return base
}

// transports returns the round trippers compared, by lib.
func transports(tb testing.TB) []struct {
	lib string
	rt  http.RoundTripper
} {
	streamTimeouts := func(tr *httppolicy.Transport) *httppolicy.Transport {
		tr.FirstByteTimeout, tr.IdleTimeout = 10*time.Second, 10*time.Second
		return tr
	}
	return []struct {
		lib string
		rt  http.RoundTripper
	}{
		{"bare", loopbackBase(tb)},
		{"watertight", streamTimeouts(&httppolicy.Transport{Base: loopbackBase(tb), Policy: quickStart(tb), Name: "llm"})},
		{"empty", streamTimeouts(&httppolicy.Transport{Base: loopbackBase(tb), Policy: emptyPipeline(tb), Name: "llm"})},
		{"failsafe", failsafehttp.NewRoundTripper(loopbackBase(tb), fsQuickStart()...)},
		{"floor", floorRT{loopbackBase(tb)}},
	}
}

// floorCause is the cause floorRT's contexts carry, as a Deadline's do.
var floorCause = errors.New("floor: timeout")

// floorRT sends each request with the contexts lib=watertight's request
// carries and nothing else: the call's deadline (30 s), a child for the
// attempt's (10 s), the stream watch's child canceled with a cause, and a
// first byte timer; it reads a small body whole before returning it, as the
// stream watch does. The standard library charges each child of a
// cancelable context a map in its parent (368 bytes, 5 allocations), and
// net/http adds a child of its own to every request's context: the floor
// is what those contexts cost through net/http, which Execute alone (whose
// fn makes no child) does not show.
type floorRT struct{ base http.RoundTripper }

func (f floorRT) RoundTrip(req *http.Request) (*http.Response, error) {
	call, cancelCall := context.WithDeadlineCause(req.Context(), time.Now().Add(30*time.Second), floorCause)
	defer cancelCall()
	attempt, cancelAttempt := context.WithDeadlineCause(call, time.Now().Add(10*time.Second), floorCause)
	defer cancelAttempt()
	watch, cancelWatch := context.WithCancelCause(attempt)
	defer cancelWatch(context.Canceled)
	firstByte := time.AfterFunc(10*time.Second, func() { cancelWatch(floorCause) })
	defer firstByte.Stop()
	resp, err := f.base.RoundTrip(req.WithContext(watch))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// A buffer of the body's known length, read once, as the stream
	// watch reads a small body.
	body := &floorBody{b: make([]byte, 0, max(resp.ContentLength, 512))}
	for {
		n, err := resp.Body.Read(body.b[len(body.b):cap(body.b)])
		body.b = body.b[:len(body.b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(body.b) == cap(body.b) {
			body.b = append(body.b, 0)[:len(body.b)]
		}
	}
	resp.Body = body
	return resp, nil
}

// floorBody is a body read whole.
type floorBody struct{ b []byte }

func (f *floorBody) Read(p []byte) (int, error) {
	if len(f.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, f.b)
	f.b = f.b[n:]
	return n, nil
}

func (f *floorBody) Close() error { return nil }

func emptyPipeline(tb testing.TB) *watertight.Pipeline {
	p, err := watertight.New("empty", watertight.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// getHello sends one GET through rt and reads the body to its end.
func getHello(tb testing.TB, rt http.RoundTripper, req *http.Request) {
	resp, err := rt.RoundTrip(req)
	if err != nil {
		tb.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != 5 || resp.StatusCode != 200 {
		tb.Fatalf("status %d, %d bytes, %v", resp.StatusCode, n, err)
	}
}

func BenchmarkTransport(b *testing.B) {
	srv := helloServer(b)
	for _, tt := range transports(b) {
		b.Run("lib="+tt.lib, func(b *testing.B) {
			req, _ := http.NewRequest("GET", srv.URL, nil)
			getHello(b, tt.rt, req) // the connection is open
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				getHello(b, tt.rt, req)
			}
		})
	}
}

func BenchmarkTransportExecute(b *testing.B) {
	p := quickStart(b)
	seq(b, nil, func() error { return p.Execute(bg, work) })
}

// memBase answers every request from memory with a 200 and a body of
// known length that gives its end with its bytes, as net/http does: the
// Transport's own cost without the network's noise.
type memBase struct{}

func (memBase) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: &helloBody{}, ContentLength: 5, Request: req}, nil
}

type helloBody struct{ done bool }

func (b *helloBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	b.done = true
	return copy(p, "hello"), io.EOF
}

func (b *helloBody) Close() error { return nil }

// BenchmarkTransportMem is BenchmarkTransport over memBase.
func BenchmarkTransportMem(b *testing.B) {
	streamTimeouts := func(tr *httppolicy.Transport) *httppolicy.Transport {
		tr.FirstByteTimeout, tr.IdleTimeout = 10*time.Second, 10*time.Second
		return tr
	}
	for _, tt := range []struct {
		lib string
		rt  http.RoundTripper
	}{
		{"bare", memBase{}},
		{"watertight", streamTimeouts(&httppolicy.Transport{Base: memBase{}, Policy: quickStart(b), Name: "llm"})},
		{"empty", streamTimeouts(&httppolicy.Transport{Base: memBase{}, Policy: emptyPipeline(b), Name: "llm"})},
		{"failsafe", failsafehttp.NewRoundTripper(memBase{}, fsQuickStart()...)},
		{"floor", floorRT{memBase{}}},
	} {
		b.Run("lib="+tt.lib, func(b *testing.B) {
			req, _ := http.NewRequest("GET", "http://dep.test/", nil)
			getHello(b, tt.rt, req)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				getHello(b, tt.rt, req)
			}
		})
	}
}

// TestTransportSetups sends one request through each setup.
func TestTransportSetups(t *testing.T) {
	srv := helloServer(t)
	for _, tt := range transports(t) {
		t.Run(tt.lib, func(t *testing.T) {
			req, _ := http.NewRequest("GET", srv.URL, nil)
			getHello(t, tt.rt, req)
			getHello(t, tt.rt, req)
		})
	}
}

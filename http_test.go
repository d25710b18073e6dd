package watertight_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/hedge"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/retry"
)

// http.Client.CloseIdleConnections, promoted onto a Client, reaches the
// client's own pool.
func TestClientCloseIdleConnections(t *testing.T) {
	var closed atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := watertight.NewHTTPClient("api", watertight.Config{Bulkhead: &bulkhead.Config{Limit: 2}}, watertight.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	c.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for closed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if closed.Load() == 0 {
		t.Error("CloseIdleConnections closed no connection")
	}
}

// A user's own retry around a request and the reading of its body retries
// a timeout during the body as it retries one before the headers: the
// error the body's Read returns carries no live marker of httppolicy's.
func TestUserRetryAroundBodyTimeout(t *testing.T) {
	for _, stallBody := range []bool{false, true} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if stallBody {
				w.Write([]byte("partial"))
				w.(http.Flusher).Flush()
			}
			<-r.Context().Done()
		}))
		c, err := watertight.NewHTTPClient("api", watertight.Config{
			Deadline: &deadline.Config{Timeout: 20 * time.Millisecond},
		}, watertight.HTTPOptions{})
		if err != nil {
			t.Fatal(err)
		}
		user, err := retry.New(retry.Config{MaxAttempts: 3, InitialInterval: time.Millisecond, Jitter: -1})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		err = user.Execute(context.Background(), func(ctx context.Context) error {
			n++
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			resp, err := c.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, err = io.ReadAll(resp.Body)
			return err
		})
		if n != 3 || !errors.Is(err, deadline.ErrExceeded) || !errors.Is(err, retry.ErrExhausted) {
			t.Errorf("stall in the body %v: %d attempts, err %v; want 3 attempts, exhausted on the deadline", stallBody, n, err)
		}
		c.Close()
		srv.CloseClientConnections()
		srv.Close()
	}
}

// A zero deadline.Deadline in Use imposes no timeout, so any Attempt
// section fits under it.
func TestZeroDeadlineInUse(t *testing.T) {
	p, err := watertight.New("x", watertight.Config{
		Attempt: &deadline.Config{Timeout: time.Second},
		Use:     compose.Policies{Deadline: &deadline.Deadline{}},
	})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	p.Close()
}

// An adaptive limiter in front of a handler sheds load with a 503 and
// Retry-After, as a bulkhead does.
func TestHandlerWithAdaptiveLimiter(t *testing.T) {
	l, err := adaptive.New(adaptive.Config{Name: "srv", MinLimit: 1, MaxLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	srv := httptest.NewServer(httppolicy.Handler(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		io.WriteString(w, "ok")
	}), httppolicy.HandlerConfig{RetryAfter: 2 * time.Second}))
	defer srv.Close()
	first := make(chan int, 1)
	go func() {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-entered
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	close(release)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "2" {
		t.Errorf("second request: %d, Retry-After %q; want 503 and 2", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code := <-first; code != http.StatusOK {
		t.Errorf("first request: %d; want 200", code)
	}
	srv.Client().CloseIdleConnections()
}

// NewHTTPClient with an Adaptive section caps the connections at its
// MaxLimit.
func TestHTTPClientAdaptiveSizing(t *testing.T) {
	c, err := watertight.NewHTTPClient("api", watertight.Config{Adaptive: &adaptive.Config{MaxLimit: 7}}, watertight.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	base := watertight.PoolOf(c, 0)
	if base.MaxConnsPerHost != 7 || c.Pipeline.Limiter() == nil {
		t.Errorf("MaxConnsPerHost = %d, Limiter %v; want 7 and the limiter", base.MaxConnsPerHost, c.Pipeline.Limiter())
	}

	// A limiter given in Use.Bulkhead sizes the pool the same way.
	l, err := adaptive.New(adaptive.Config{MaxLimit: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c2, err := watertight.NewHTTPClient("api2", watertight.Config{Use: compose.Policies{Bulkhead: l}}, watertight.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	base = watertight.PoolOf(c2, 0)
	if base.MaxConnsPerHost != 9 || c2.Pipeline.Limiter() != l {
		t.Errorf("Use.Bulkhead limiter: MaxConnsPerHost = %d; want its MaxLimit 9", base.MaxConnsPerHost)
	}
}

// NewHTTPClient passes its stream timeouts to the Transport: a server that
// sends its headers and then nothing fails the call with the first-byte
// timeout, and a stream that stalls after its first event with the idle
// timeout (keepalive comments do not count). Negative values fail at
// construction with the field named.
func TestHTTPClientStreamTimeouts(t *testing.T) {
	for _, tt := range []struct {
		name string
		h    watertight.HTTPOptions
		want string
	}{
		{"first byte", watertight.HTTPOptions{FirstByteTimeout: -1}, "HTTPOptions.FirstByteTimeout"},
		{"idle", watertight.HTTPOptions{IdleTimeout: -time.Second}, "HTTPOptions.IdleTimeout"},
		{"empty stream end", watertight.HTTPOptions{StreamEnd: &httppolicy.StreamEnd{}}, "HTTPOptions.StreamEnd"},
		{"long stream end", watertight.HTTPOptions{StreamEnd: &httppolicy.StreamEnd{Event: strings.Repeat("e", 65)}}, "HTTPOptions.StreamEnd"},
	} {
		if _, err := watertight.NewHTTPClient("api", watertight.Config{}, tt.h); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v; want it to name %s", tt.name, err, tt.want)
		}
	}

	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		if r.URL.Path == "/stall" {
			io.WriteString(w, "data: {\"token\": 1}\n\n")
			w.(http.Flusher).Flush()
		}
		for {
			select {
			case <-release:
				return
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
				io.WriteString(w, ": ping\n\n") // a keepalive: counts for neither timer
				w.(http.Flusher).Flush()
			}
		}
	}))
	defer srv.Close()
	defer close(release)
	c, err := watertight.NewHTTPClient("llm", watertight.Config{}, watertight.HTTPOptions{
		FirstByteTimeout: 150 * time.Millisecond,
		IdleTimeout:      150 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A generous bound of its own, so that without the timeouts the test
	// fails instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	get := func(path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		return c.Do(req)
	}
	if _, err := get("/silent"); !errors.Is(err, httppolicy.ErrFirstByteTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("headers then only keepalives: err = %v; want ErrFirstByteTimeout", err)
	}
	resp, err := get("/stall")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, httppolicy.ErrIdleTimeout) {
		t.Errorf("one event, then only keepalives: read err = %v; want ErrIdleTimeout", err)
	}
}

// With HTTPOptions.Hedge, the client hedges its GETs: the hedge takes a
// bulkhead slot of its own, and the pool, sized to the bulkhead's Limit,
// has a connection for it while the first attempt is stuck.
func TestHTTPClientHedgesWithHTTPOptionsHedge(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			<-r.Context().Done() // slow: no answer until canceled
			return
		}
		io.WriteString(w, "fast")
	}))
	defer srv.Close()
	h, err := hedge.New(hedge.Config{Delay: 5 * time.Millisecond, MaxHedges: 1})
	if err != nil {
		t.Fatal(err)
	}
	c, err := watertight.NewHTTPClient("api", watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 2},
		Deadline: &deadline.Config{Timeout: 5 * time.Second},
	}, watertight.HTTPOptions{Hedge: h})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hg := c.Client.Transport.(*httppolicy.Hedging)
	if base := watertight.PoolOf(c, 0); base.MaxConnsPerHost != 2 || hg.Hedge != h {
		t.Fatalf("MaxConnsPerHost = %d, want the Limit, 2", base.MaxConnsPerHost)
	}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "fast" || n.Load() != 2 {
		t.Fatalf("body %q after %d requests, want the hedge's after 2", body, n.Load())
	}
}

// Hedged attempts run concurrently, each a call of a pipeline whose
// Bulkhead slot learns from latencies: each marks its own attempt's answer
// (-race checks), and every slot is free once the calls end.
func TestHTTPClientHedgeWithAdaptiveLimit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(r.ContentLength%3) * time.Millisecond)
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	h, err := hedge.New(hedge.Config{Delay: time.Microsecond, MaxHedges: 2})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := adaptive.New(adaptive.Config{MaxQueue: adaptive.Unbounded})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	c, err := watertight.NewHTTPClient("api", watertight.Config{
		Use: compose.Policies{Bulkhead: lim},
	}, watertight.HTTPOptions{Hedge: h})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 10 {
				// POSTs are not hedged.
				var resp *http.Response
				var err error
				if j%2 == 0 {
					resp, err = c.Get(srv.URL)
				} else {
					resp, err = c.Post(srv.URL, "text/plain", strings.NewReader(strings.Repeat("x", i+j)))
				}
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	// A hedge returns with its winner; its losers, canceled, free their
	// slots as they end, on their own goroutines.
	for deadline := time.Now().Add(10 * time.Second); lim.Active() != 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := lim.Active(); n != 0 {
		t.Fatalf("%d slots held after every call ended", n)
	}
}

// ownBase is a user's own transport: it counts the requests it sends and
// the calls of its CloseIdleConnections.
type ownBase struct {
	sent, closed atomic.Int32
	rt           http.RoundTripper
}

func (b *ownBase) RoundTrip(r *http.Request) (*http.Response, error) {
	b.sent.Add(1)
	return b.rt.RoundTrip(r)
}

func (b *ownBase) CloseIdleConnections() { b.closed.Add(1) }

// HTTPOptions.Base sends every attempt in place of the pool NewHTTPClient
// builds, under the pipeline, and Close closes its idle connections.
func TestHTTPClientWithItsOwnBase(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	base := &ownBase{rt: srv.Client().Transport}
	c, err := watertight.NewHTTPClient("api", watertight.Config{Bulkhead: &bulkhead.Config{Limit: 1}}, watertight.HTTPOptions{Base: base})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Pipeline.Bulkhead().Active(); got != 1 {
		t.Errorf("%d slots held while the body is unread; want 1", got)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	c.Close()
	srv.Client().CloseIdleConnections()
	if base.sent.Load() != 1 || base.closed.Load() != 1 {
		t.Errorf("the base sent %d requests and was closed %d times; want 1 and 1", base.sent.Load(), base.closed.Load())
	}
}

package httppolicy_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

func newHedge(t testing.TB, delay time.Duration, maxHedges int, onHedge func()) *retry.Hedge {
	t.Helper()
	cfg := retry.HedgeConfig{Delay: delay, MaxHedges: maxHedges}
	if onHedge != nil {
		cfg.OnHedge = func(context.Context, int, bool) { onHedge() }
	}
	h, err := retry.NewHedge(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// outcomes is a policy for the Breaker slot that records what each attempt
// returned, as a breaker sees it.
type outcomes struct {
	mu   sync.Mutex
	errs []error
}

func (o *outcomes) Execute(ctx context.Context, fn policy.Func) error {
	err := fn(ctx)
	o.mu.Lock()
	o.errs = append(o.errs, err)
	o.mu.Unlock()
	return err
}

func (o *outcomes) get() []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]error(nil), o.errs...)
}

// A slow first attempt and a fast hedge: the caller gets the hedge's
// response; the first attempt's request is canceled (the server sees it
// end), a breaker below the hedge sees the winner's success and the
// loser's outcome as excluded (context.Canceled, which a real breaker
// counts neither way: one counted failure would open this one), and the
// call's slot is free once the body is closed.
func TestHedgeFastHedgeWins(t *testing.T) {
	var n atomic.Int32
	loserCanceled := make(chan struct{})
	testDone := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			select {
			case <-r.Context().Done(): // no answer until the Transport gives up on it
				close(loserCanceled)
			case <-testDone: // the test failed
			}
			return
		}
		io.WriteString(w, "fast")
	})
	t.Cleanup(func() { close(testDone) }) // before srv.Close
	bh := newBulkhead(t, 4, 0)
	seen := &outcomes{}
	br := newBreaker(t, 1)
	tr := &httppolicy.Transport{
		Base: newBase(t, 4),
		Policy: newPipeline(t, compose.Policies{
			Bulkhead: bh, Retry: newHedge(t, 5*time.Millisecond, 1, nil), Breaker: seen, Attempt: br,
		}),
	}
	// A generous timeout: a hang fails the test fast.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The loser is canceled as the winner is accepted, not when the call
	// ends: the body is still open.
	select {
	case <-loserCanceled:
	case <-time.After(5 * time.Second):
		t.Fatal("the server never saw the losing request end")
	}
	if got := readAll(t, resp.Body); got != "fast" {
		t.Fatalf("body %q, want the hedge's", got)
	}
	resp.Body.Close()
	if bh.Active() != 0 {
		t.Fatalf("Active %d after Close", bh.Active())
	}
	waitFor(t, "both outcomes", func() bool { return len(seen.get()) == 2 })
	var ok, excluded int
	for _, err := range seen.get() {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, context.Canceled):
			excluded++
		default:
			t.Errorf("outcome %v: neither the winner's nor an excluded loser's", err)
		}
	}
	if ok != 1 || excluded != 1 {
		t.Fatalf("outcomes %v, want one success and one excluded", seen.get())
	}
	if br.State() != breaker.Closed {
		t.Fatalf("breaker %v: it counted the loser", br.State())
	}
	if n.Load() != 2 {
		t.Fatalf("%d requests, want 2", n.Load())
	}
}

// A request the Transport may not retry is never sent twice at once: its
// attempt takes the hedge's claim as it enters, so that the hedge starts
// no attempt beside it (OnHedge is never called, nothing is taken from a
// budget). Without an idempotency key (a POST), or with one but a body
// that cannot be replayed (no GetBody).
func TestHedgeNotForUnsafeRequests(t *testing.T) {
	tests := []struct {
		name string
		req  func(url string) *http.Request
	}{
		{"POST without key", func(url string) *http.Request {
			req, _ := http.NewRequest("POST", url, strings.NewReader("payload"))
			return req
		}},
		{"key without GetBody", func(url string) *http.Request {
			req, _ := http.NewRequest("POST", url, strings.NewReader("payload"))
			req.Header.Set("Idempotency-Key", "k1")
			req.GetBody = nil
			return req
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hedges, n, running, maxRunning atomic.Int32
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				if r := running.Add(1); r > maxRunning.Load() {
					maxRunning.Store(r)
				}
				defer running.Add(-1)
				io.Copy(io.Discard, r.Body)
				// Answer after many hedge delays.
				select {
				case <-time.After(20 * time.Millisecond):
				case <-r.Context().Done():
					return
				}
				io.WriteString(w, "one")
			})
			bh := newBulkhead(t, 2, 0)
			seen := &outcomes{}
			tr := &httppolicy.Transport{
				Base: newBase(t, 2),
				Policy: newPipeline(t, compose.Policies{
					Bulkhead: bh, Retry: newHedge(t, time.Millisecond, 1, func() { hedges.Add(1) }), Breaker: seen,
				}),
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := tr.RoundTrip(tt.req(srv.URL).WithContext(ctx))
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp.Body); got != "one" {
				t.Fatalf("body %q", got)
			}
			resp.Body.Close()
			waitFor(t, "the outcome", func() bool { return len(seen.get()) == 1 })
			if n.Load() != 1 || maxRunning.Load() != 1 || bh.Active() != 0 || hedges.Load() != 0 {
				t.Fatalf("%d requests, at most %d at once, Active %d, %d hedges: want the request sent once, no hedge",
					n.Load(), maxRunning.Load(), bh.Active(), hedges.Load())
			}
			for _, err := range seen.get() {
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Fatalf("outcome %v: the attempt that sent nothing must be excluded", err)
				}
			}
		})
	}
}

// A POST with an Idempotency-Key is hedged, its body sent again with
// GetBody, byte for byte.
func TestHedgeReplaysBody(t *testing.T) {
	payload := make([]byte, 64<<10)
	crand.Read(payload)
	var (
		mu     sync.Mutex
		bodies [][]byte
	)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		first := len(bodies) == 1
		mu.Unlock()
		if first {
			<-r.Context().Done()
			return
		}
		w.Write(b)
	})
	tr := &httppolicy.Transport{
		Base:   newBase(t, 4),
		Policy: newPipeline(t, compose.Policies{Retry: newHedge(t, 5*time.Millisecond, 1, nil)}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, bytes.NewReader(payload))
	req.Header.Set("Idempotency-Key", "k1")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("echo of %d bytes, err %v: want the payload", len(got), err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 2 || !bytes.Equal(bodies[0], payload) || !bytes.Equal(bodies[1], payload) {
		t.Fatalf("the server got %d bodies, want the payload twice", len(bodies))
	}
}

// A loser whose response arrives after the winner's (its base ignores the
// cancellation) has its body closed, and the caller gets exactly the
// winner's response, without waiting for the loser; the whole exchange,
// loser included, ends.
func TestHedgeLateLoserClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			if n == 1 {
				time.Sleep(50 * time.Millisecond) // deaf to its context
				resp, b := fedResponse(req.WithContext(context.WithoutCancel(req.Context())), 200, "", false, step{0, "slow"})
				return resp, b, nil
			}
			resp, b := fedResponse(req, 200, "", false, step{0, "fast"})
			return resp, b, nil
		}}
		bh := newBulkhead(t, 1, 0)
		seen := &outcomes{}
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{
			Bulkhead: bh, Retry: newHedge(t, 10*time.Millisecond, 1, nil), Breaker: seen,
		})}
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp.Body); got != "fast" {
			t.Fatalf("body %q", got)
		}
		resp.Body.Close()
		if bh.Active() != 0 {
			t.Fatalf("Active %d once the winner's body is closed: the call waited for the deaf loser", bh.Active())
		}
		// The deaf loser ends on its own time, after the call.
		time.Sleep(time.Second)
		synctest.Wait()
		if base.count() != 2 || !base.allClosed() || bh.Active() != 0 || len(seen.get()) != 2 {
			t.Fatalf("%d requests, all closed %v, Active %d, outcomes %v", base.count(), base.allClosed(), bh.Active(), seen.get())
		}
	})
}

// Stream timeouts apply to each hedged attempt: a first attempt whose first
// byte is late is hedged, and the hedge's response is handed over.
func TestHedgeWithFirstByteTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			if n == 1 {
				resp, b := fedResponse(req, 200, "", false, step{time.Hour, "late"})
				return resp, b, nil
			}
			resp, b := fedResponse(req, 200, "", false, step{time.Millisecond, "on time"})
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: time.Second, Policy: newPipeline(t, compose.Policies{
			Retry: newHedge(t, 10*time.Millisecond, 1, nil),
		})}
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp.Body); got != "on time" {
			t.Fatalf("body %q", got)
		}
		resp.Body.Close()
		synctest.Wait()
		if !base.allClosed() {
			t.Fatal("a body left open")
		}
	})
}

// When every attempt fails with a status, the caller gets the last failure
// response, as without a hedge.
func TestHedgeAllFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			time.Sleep(time.Duration(n) * 20 * time.Millisecond)
			resp, b := fedResponse(req, 503, "", false, step{0, "busy"})
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{
			Retry: newHedge(t, 10*time.Millisecond, 2, nil),
		})}
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 503 || readAll(t, resp.Body) != "busy" {
			t.Fatalf("status %d", resp.StatusCode)
		}
		resp.Body.Close()
		synctest.Wait()
		if base.count() != 3 || !base.allClosed() {
			t.Fatalf("%d requests, all closed %v", base.count(), base.allClosed())
		}
	})
}

// TestHedgeStorm sends many concurrent hedged requests (GETs, and POSTs
// with and without a key) to a server that answers fast or slowly, fails,
// breaks or hangs mid-body, or hangs before the headers, with callers
// that cancel at random: every slot is freed, every server handler ends,
// the POSTs without a key are never sent twice at once, and nothing leaks
// (goleak).
func TestHedgeStorm(t *testing.T) {
	const limit, maxHedges = 4, 2
	workers, perWorker := 8, 40
	if testing.Short() {
		perWorker = 15
	}
	var handlers atomic.Int32
	var postMu sync.Mutex
	postsRunning := map[string]int{}
	var postOverlap atomic.Bool
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Add(-1)
		if r.Method == "POST" && r.Header.Get("Idempotency-Key") == "" {
			id := r.Header.Get("X-Call")
			postMu.Lock()
			postsRunning[id]++
			if postsRunning[id] > 1 {
				postOverlap.Store(true)
			}
			postMu.Unlock()
			defer func() {
				postMu.Lock()
				postsRunning[id]--
				postMu.Unlock()
			}()
		}
		io.Copy(io.Discard, r.Body)
		rc := http.NewResponseController(w)
		switch rand.IntN(6) {
		case 0: // fast
		case 1: // slow
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		case 2: // a failure
			w.WriteHeader(503)
			return
		case 3: // broken mid-body
			w.Header().Set("Content-Length", "1000")
			io.WriteString(w, "x")
			rc.Flush()
			panic(http.ErrAbortHandler)
		case 4: // hangs mid-body
			io.WriteString(w, "x")
			rc.Flush()
			<-r.Context().Done()
			return
		case 5: // hangs before the headers
			<-r.Context().Done()
			return
		}
		io.WriteString(w, strings.Repeat("y", 256))
	})
	bh := newBulkhead(t, limit, 64)
	tr := &httppolicy.Transport{
		Base:        newBase(t, limit*(1+maxHedges)),
		IdleTimeout: 20 * time.Millisecond,
		Policy: newPipeline(t, compose.Policies{
			Bulkhead: bh, Deadline: newDeadline(t, 200*time.Millisecond),
			Retry: newHedge(t, time.Millisecond, maxHedges, nil), Breaker: newBreaker(t, 1<<30),
		}),
	}
	var calls atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for i := range perWorker {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if rng.IntN(3) == 0 {
					// Canceled at a random moment: queued, sending, or
					// reading the body.
					stop := time.AfterFunc(time.Duration(rng.IntN(4000))*time.Microsecond, cancel)
					defer stop.Stop()
				}
				var req *http.Request
				switch rng.IntN(3) {
				case 0:
					req, _ = http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
				case 1:
					req, _ = http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader("body"))
					req.Header.Set("Idempotency-Key", "k")
				case 2:
					req, _ = http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader("body"))
					req.Header.Set("X-Call", strconv.Itoa(w*1000+i))
				}
				calls.Add(1)
				resp, err := tr.RoundTrip(req)
				if err == nil {
					if rng.IntN(2) == 0 {
						io.Copy(io.Discard, resp.Body)
					} else {
						resp.Body.Read(make([]byte, 1))
					}
					resp.Body.Close()
				}
				cancel()
			}
		})
	}
	wg.Wait()
	if bh.Active() != 0 || bh.Queued() != 0 {
		t.Fatalf("Active %d, Queued %d after the storm", bh.Active(), bh.Queued())
	}
	waitFor(t, "the server's handlers to end", func() bool { return handlers.Load() == 0 })
	if postOverlap.Load() {
		t.Fatal("a POST without a key was sent twice at once")
	}
}

// signalsFunc is a Signals run by a function.
type signalsFunc func(*http.Response)

func (f signalsFunc) Observe(resp *http.Response) { f(resp) }

// A Signals that panics in a hedge's attempt: the hedge carries the panic
// to RoundTrip's caller after canceling the other attempt, every body is
// closed and the slot is free.
func TestHedgeSignalsPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			if n == 1 {
				resp, b := fedResponse(req, 200, "", false, step{time.Hour, "never"})
				select {
				case <-time.After(time.Hour):
				case <-req.Context().Done():
					b.Close()
					return nil, nil, req.Context().Err()
				}
				return resp, b, nil
			}
			resp, b := fedResponse(req, 200, "", false, step{0, "hedge"})
			return resp, b, nil
		}}
		bh := newBulkhead(t, 1, 0)
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{
			Bulkhead: bh, Retry: newHedge(t, 10*time.Millisecond, 1, nil),
		}), Signals: signalsFunc(func(*http.Response) { panic("signals") })}
		func() {
			defer func() {
				if v := recover(); v != "signals" {
					t.Errorf("recovered %v, want the Signals panic", v)
				}
			}()
			get(t, tr, context.Background())
		}()
		synctest.Wait()
		if base.count() != 2 || !base.allClosed() || bh.Active() != 0 {
			t.Fatalf("%d requests, all closed %v, Active %d", base.count(), base.allClosed(), bh.Active())
		}
	})
}

package httppolicy_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/hedge"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// Tests of Hedging around a Transport: each attempt is a whole call of
// the Transport's pipeline. Each test is named for the behaviour it
// checks.

func newHedge(t testing.TB, delay time.Duration, maxHedges int, onHedge func()) *hedge.Hedge {
	t.Helper()
	cfg := hedge.Config{Delay: delay, MaxHedges: maxHedges}
	if onHedge != nil {
		cfg.OnHedge = func(context.Context, int, bool) { onHedge() }
	}
	h, err := hedge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// hedging returns a Hedging with h around tr.
func hedging(h *hedge.Hedge, tr *httppolicy.Transport) *httppolicy.Hedging {
	return &httppolicy.Hedging{Base: tr, Hedge: h, IsFailure: tr.IsFailure}
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
// end); a breaker in the pipeline sees the winner's success and the
// loser's outcome as excluded (one counted failure would open this one);
// each attempt held a slot of its own, and every slot is free once the
// body is closed.
func TestHedgingFastHedgeWins(t *testing.T) {
	var n atomic.Int32
	loserCanceled := make(chan struct{})
	testDone := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			select {
			case <-r.Context().Done(): // no answer until the hedge gives up on it
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
		Base:   newBase(t, 4),
		Policy: newPipeline(t, compose.Policies{Bulkhead: bh, Breaker: seen, Attempt: br}),
	}
	// A generous timeout: a hang fails the test fast.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := (&http.Client{Transport: hedging(newHedge(t, 5*time.Millisecond, 1, nil), tr)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The loser is canceled as the winner is returned: the body is still
	// open.
	select {
	case <-loserCanceled:
	case <-time.After(5 * time.Second):
		t.Fatal("the server never saw the losing request end")
	}
	if got := readAll(t, resp.Body); got != "fast" {
		t.Fatalf("body %q, want the hedge's", got)
	}
	resp.Body.Close()
	waitFor(t, "both outcomes", func() bool { return len(seen.get()) == 2 })
	waitFor(t, "the slots to be free", func() bool { return bh.Active() == 0 })
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

// A request that is not safe to send twice at once goes to the base once:
// a POST, with or without an Idempotency-Key, a PATCH, and a PUT whose
// body cannot be replayed (no GetBody). The hedge never starts: OnHedge is
// never called.
func TestHedgingNeverSendsUnsafeRequestsTwice(t *testing.T) {
	tests := []struct {
		name string
		req  func(url string) *http.Request
	}{
		{"POST", func(url string) *http.Request {
			req, _ := http.NewRequest("POST", url, strings.NewReader("payload"))
			return req
		}},
		{"POST with a key", func(url string) *http.Request {
			req, _ := http.NewRequest("POST", url, strings.NewReader("payload"))
			req.Header.Set("Idempotency-Key", "k1")
			return req
		}},
		{"PATCH", func(url string) *http.Request {
			req, _ := http.NewRequest("PATCH", url, strings.NewReader("payload"))
			return req
		}},
		{"PUT without GetBody", func(url string) *http.Request {
			req, _ := http.NewRequest("PUT", url, strings.NewReader("payload"))
			req.GetBody = nil
			return req
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hedges, n atomic.Int32
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				io.Copy(io.Discard, r.Body)
				// Answer after many hedge delays.
				select {
				case <-time.After(20 * time.Millisecond):
				case <-r.Context().Done():
					return
				}
				io.WriteString(w, "one")
			})
			tr := &httppolicy.Transport{Base: newBase(t, 2), Policy: newPipeline(t, compose.Policies{Bulkhead: newBulkhead(t, 2, 0)})}
			hg := hedging(newHedge(t, time.Millisecond, 1, func() { hedges.Add(1) }), tr)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := hg.RoundTrip(tt.req(srv.URL).WithContext(ctx))
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp.Body); got != "one" {
				t.Fatalf("body %q", got)
			}
			resp.Body.Close()
			if n.Load() != 1 || hedges.Load() != 0 {
				t.Fatalf("%d requests, %d hedges: want the request sent once, no hedge", n.Load(), hedges.Load())
			}
		})
	}
}

// A PUT is hedged, its body sent again with GetBody, byte for byte.
func TestHedgingReplaysTheBody(t *testing.T) {
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
	tr := &httppolicy.Transport{Base: newBase(t, 4), Policy: newPipeline(t, compose.Policies{})}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL, bytes.NewReader(payload))
	resp, err := hedging(newHedge(t, 5*time.Millisecond, 1, nil), tr).RoundTrip(req)
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
// winner's response, without waiting for the loser; the loser's slot is
// free once it returns.
func TestHedgingClosesALateLosersBody(t *testing.T) {
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
		bh := newBulkhead(t, 2, 0)
		seen := &outcomes{}
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Bulkhead: bh, Breaker: seen})}
		start := time.Now()
		resp, err := get(t, hedging(newHedge(t, 10*time.Millisecond, 1, nil), tr), context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp.Body); got != "fast" || time.Since(start) != 10*time.Millisecond {
			t.Fatalf("body %q after %v, want the winner's at 10ms", got, time.Since(start))
		}
		resp.Body.Close()
		// The deaf loser ends on its own time, after the call.
		time.Sleep(time.Second)
		synctest.Wait()
		if base.count() != 2 || !base.allClosed() || bh.Active() != 0 || len(seen.get()) != 2 {
			t.Fatalf("%d requests, all closed %v, Active %d, outcomes %v", base.count(), base.allClosed(), bh.Active(), seen.get())
		}
	})
}

// Stream timeouts apply to each hedged attempt: a first attempt whose first
// byte is late is hedged, and the hedge's response is returned.
func TestHedgingWithFirstByteTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			if n == 1 {
				resp, b := fedResponse(req, 200, "", false, step{time.Hour, "late"})
				return resp, b, nil
			}
			resp, b := fedResponse(req, 200, "", false, step{time.Millisecond, "on time"})
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: time.Second, Policy: newPipeline(t, compose.Policies{})}
		resp, err := get(t, hedging(newHedge(t, 10*time.Millisecond, 1, nil), tr), context.Background())
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

// When every attempt fails with a status, the caller gets the failure
// response the hedge's error names (the last to fail), as without a
// hedge, and every other response is closed.
func TestHedgingReturnsTheLastFailureResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			time.Sleep(time.Duration(4-n) * 20 * time.Millisecond) // the last sent fails first
			resp, b := fedResponse(req, 503, "", false, step{0, "busy" + strconv.Itoa(n)})
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{})}
		resp, err := get(t, hedging(newHedge(t, 10*time.Millisecond, 2, nil), tr), context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp.Body); resp.StatusCode != 503 || got != "busy1" {
			t.Fatalf("status %d body %q, want 503 busy1 (attempt 1 failed last)", resp.StatusCode, got)
		}
		resp.Body.Close()
		synctest.Wait()
		if base.count() != 3 || !base.allClosed() {
			t.Fatalf("%d requests, all closed %v", base.count(), base.allClosed())
		}
	})
}

// Once a response is returned, the hedge starts no more attempts while the
// caller reads its stream: its timer starts no hedge, calls no OnHedge and
// takes nothing from the retry budget.
func TestHedgingStartsNoHedgeOnceAResponseIsReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			time.Sleep(time.Millisecond)
			resp, b := fedResponse(req, 200, "", false, step{0, "a"}, step{100 * time.Millisecond, "b"})
			return resp, b, nil
		}}
		budget, err := retry.NewBudget(retry.BudgetConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var hedges atomic.Int32
		h, err := hedge.New(hedge.Config{Delay: 10 * time.Millisecond, MaxHedges: 3, Budget: budget,
			OnHedge: func(context.Context, int, bool) { hedges.Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		before := budget.Available()
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{})}
		resp, err := get(t, hedging(h, tr), context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp.Body); got != "ab" {
			t.Errorf("body %q, want ab", got)
		}
		resp.Body.Close()
		synctest.Wait()
		if hedges.Load() != 0 || base.count() != 1 || budget.Available() < before {
			t.Errorf("OnHedge called %d times, %d requests sent, budget %.2f -> %.2f: want no hedge",
				hedges.Load(), base.count(), before, budget.Available())
		}
	})
}

// A caller canceling just as the hedge's timer fires: every attempt's
// outcome is the caller's cancellation, which a breaker excludes.
func TestHedgingCallerCancelAsHedgeFiresOpensNoBreaker(t *testing.T) {
	for i := range 20 {
		synctest.Test(t, func(t *testing.T) {
			base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
				r, err := waitHeaders(req)
				return r, nil, err
			}}
			br := newBreaker(t, 1)
			seen := &outcomes{}
			tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Breaker: seen, Attempt: br})}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			time.AfterFunc(10*time.Millisecond, cancel)
			if _, err := get(t, hedging(newHedge(t, 10*time.Millisecond, 1, nil), tr), ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("run %d: err %v, want context.Canceled", i, err)
			}
			synctest.Wait()
			if br.State() != breaker.Closed {
				t.Errorf("run %d: breaker %v after the caller canceled", i, br.State())
			}
			for _, e := range seen.get() {
				if !errors.Is(e, context.Canceled) {
					t.Errorf("run %d: an attempt returned %v to the breaker", i, e)
				}
			}
		})
	}
}

// A hedge whose GetBody fails is a failed attempt, not the end of the
// call: the first attempt's 200 is the caller's, and the breaker is left
// alone.
func TestHedgingGetBodyErrorLeavesTheFirstAttemptRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			select {
			case <-time.After(30 * time.Millisecond):
			case <-req.Context().Done():
				return nil, nil, req.Context().Err()
			}
			resp, b := fedResponse(req, 200, "", false, step{0, "ok"})
			return resp, b, nil
		}}
		br := newBreaker(t, 1)
		var getBody atomic.Int32
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Breaker: br})}
		req, _ := http.NewRequest("PUT", "http://dep.test/", strings.NewReader("payload"))
		req.GetBody = func() (io.ReadCloser, error) {
			getBody.Add(1)
			return nil, errors.New("spool gone")
		}
		resp, err := hedging(newHedge(t, 10*time.Millisecond, 2, nil), tr).RoundTrip(req)
		if err != nil {
			t.Fatalf("RoundTrip: %v", err)
		}
		if got := readAll(t, resp.Body); got != "ok" {
			t.Errorf("body %q, want ok", got)
		}
		resp.Body.Close()
		synctest.Wait()
		if br.State() != breaker.Closed || base.count() != 1 || getBody.Load() != 2 {
			t.Errorf("breaker %v, %d requests, GetBody called %d times: want closed, 1, 2", br.State(), base.count(), getBody.Load())
		}
	})
}

// A loser whose base transport ignores its context (a deaf SDK, a stuck
// dial) does not delay the winner: RoundTrip returns, and the body's Close
// returns, as soon as the winner's response is in and read; the loser's
// slot is freed when it returns.
func TestHedgingDeafLoserDoesNotDelayTheWinner(t *testing.T) {
	for _, tc := range []struct {
		name   string
		code   int
		stream bool
	}{{"204 no body", 204, false}, {"200 streamed", 200, true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				deafDone := make(chan struct{})
				base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
					if n == 1 {
						time.Sleep(time.Second) // deaf to its context
						close(deafDone)
						return nil, nil, context.Canceled
					}
					resp, b := fedResponse(req, tc.code, "", false, step{0, "fast"})
					if !tc.stream {
						b.Close()
						resp.Body = http.NoBody
						return resp, nil, nil
					}
					return resp, b, nil
				}}
				bh := newBulkhead(t, 2, 0)
				tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Bulkhead: bh})}
				start := time.Now()
				resp, err := get(t, hedging(newHedge(t, 10*time.Millisecond, 1, nil), tr), context.Background())
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp.Body)
				resp.Body.Close()
				if d := time.Since(start); d != 10*time.Millisecond {
					t.Errorf("the body was read and closed after %v, want 10ms", d)
				}
				if bh.Active() != 1 {
					t.Errorf("Active %d after the winner's body was closed, want the deaf loser's 1", bh.Active())
				}
				<-deafDone
				synctest.Wait()
				if bh.Active() != 0 || !base.allClosed() {
					t.Errorf("Active %d, all closed %v once the loser returned", bh.Active(), base.allClosed())
				}
			})
		})
	}
}

// A panic in a hedged attempt crashes the program, as package hedge says:
// it is not carried to RoundTrip's caller. Run in a child process.
func TestHedgingAttemptPanicCrashes(t *testing.T) {
	if os.Getenv("WATERTIGHT_HEDGING_PANIC") == "1" {
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			panic("base panicked")
		})
		h, err := hedge.New(hedge.Config{Delay: time.Millisecond})
		if err != nil {
			panic(err)
		}
		req, _ := http.NewRequest(http.MethodGet, "http://dep.test/", nil)
		(&httppolicy.Hedging{Base: base, Hedge: h}).RoundTrip(req)
		fmt.Fprintln(os.Stderr, "RoundTrip returned")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHedgingAttemptPanicCrashes$", "-test.count=1")
	cmd.Env = append(os.Environ(), "WATERTIGHT_HEDGING_PANIC=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "panic: base panicked") {
		t.Fatalf("child ended with %v, want a crash with the base's panic; output:\n%s", err, out)
	}
}

// handled records the errors given to otel.Handle.
type handled struct {
	mu   sync.Mutex
	errs []error
}

func (h *handled) Handle(err error) {
	h.mu.Lock()
	h.errs = append(h.errs, err)
	h.mu.Unlock()
}

func (h *handled) get() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.errs...)
}

// A policy that runs fn concurrently with itself has its second attempt
// refused, so that the request is never sent twice at once.
func TestTransportRefusesConcurrentAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			time.Sleep(20 * time.Millisecond)
			resp, b := fedResponse(req, 200, "", false, step{0, "ok"})
			return resp, b, nil
		}}
		tw := &twice{second: make(chan error, 1)}
		resp, err := get(t, &httppolicy.Transport{Base: base, Policy: tw}, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		second := <-tw.second
		resp.Body.Close()
		synctest.Wait()
		if second == nil || !strings.Contains(second.Error(), "at once") || base.count() != 1 {
			t.Fatalf("a policy that runs fn twice at once: second attempt %v after %d requests; want it refused", second, base.count())
		}
	})
}

// twice is a policy that runs fn twice at once; the second run's error
// goes to second.
type twice struct{ second chan error }

func (tw *twice) Execute(ctx context.Context, fn policy.Func) error {
	first := make(chan error, 1)
	go func() { first <- fn(ctx) }()
	time.Sleep(time.Millisecond)
	tw.second <- fn(ctx)
	return <-first
}

// A policy that ignores policy.Permanent and runs fn again after a POST
// failed in a way that may not be retried (a 500) does not get the POST
// sent again: the Transport refuses the second attempt.
func TestTransportNeverResendsAPostAfterAFailureThatMayNotBeRetried(t *testing.T) {
	base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
		resp, b := fedResponse(req, 500, "", false, step{0, "boom"})
		return resp, b, nil
	}}
	tr := &httppolicy.Transport{Base: base, Policy: again{}}
	req, _ := http.NewRequest("POST", "http://dep.test/", strings.NewReader("charge $100"))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("charge $100")), nil }
	_, err := tr.RoundTrip(req)
	if n := base.count(); n != 1 || err == nil || !strings.Contains(err.Error(), "may not be sent again") {
		t.Fatalf("the POST reached the server %d times, err %v; want once, the second attempt refused", n, err)
	}
}

// again is a policy that runs fn twice in turn, whatever the first run
// returned.
type again struct{}

func (again) Execute(ctx context.Context, fn policy.Func) error {
	fn(ctx)
	return fn(ctx)
}

// TestHedgingStorm sends many concurrent hedged requests (GETs, PUTs, and
// POSTs) to a server that answers fast or slowly, fails, breaks or hangs
// mid-body, or hangs before the headers, with callers that cancel at
// random: every slot is freed, every server handler ends, no POST is ever
// sent twice, and nothing leaks (goleak).
func TestHedgingStorm(t *testing.T) {
	const limit, maxHedges = 4, 2
	workers, perWorker := 8, 40
	if testing.Short() {
		perWorker = 15
	}
	var handlers atomic.Int32
	var postMu sync.Mutex
	posts := map[string]int{}
	var postTwice atomic.Bool
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Add(-1)
		if r.Method == "POST" {
			id := r.Header.Get("X-Call")
			postMu.Lock()
			if posts[id]++; posts[id] > 1 {
				postTwice.Store(true)
			}
			postMu.Unlock()
		}
		io.Copy(io.Discard, r.Body)
		stormAnswer(w, r)
	})
	bh := newBulkhead(t, limit*(1+maxHedges), 64)
	tr := &httppolicy.Transport{
		Base:        newBase(t, limit*(1+maxHedges)),
		IdleTimeout: 20 * time.Millisecond,
		Policy: newPipeline(t, compose.Policies{
			Bulkhead: bh, Deadline: newDeadline(t, 200*time.Millisecond), Breaker: newBreaker(t, 1<<30),
		}),
	}
	hg := hedging(newHedge(t, time.Millisecond, maxHedges, nil), tr)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for i := range perWorker {
				stormCall(hg, rng, srv.URL, strconv.Itoa(w*1000+i))
			}
		})
	}
	wg.Wait()
	waitFor(t, "the slots to be free", func() bool { return bh.Active() == 0 && bh.Queued() == 0 })
	waitFor(t, "the server's handlers to end", func() bool { return handlers.Load() == 0 })
	if postTwice.Load() {
		t.Fatal("a POST was sent twice")
	}
}

// stormAnswer answers a storm's request at random: fast or slowly, a
// failure, a body broken or hanging, or no headers.
func stormAnswer(w http.ResponseWriter, r *http.Request) {
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
}

// stormCall sends one request of a storm, canceled at a random moment one
// time in three, and reads its body whole or in part.
func stormCall(rt http.RoundTripper, rng *rand.Rand, url, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if rng.IntN(3) == 0 {
		// Canceled at a random moment: queued, sending, or reading the
		// body.
		stop := time.AfterFunc(time.Duration(rng.IntN(4000))*time.Microsecond, cancel)
		defer stop.Stop()
	}
	var req *http.Request
	switch rng.IntN(3) {
	case 0:
		req, _ = http.NewRequestWithContext(ctx, "GET", url, nil)
	case 1:
		req, _ = http.NewRequestWithContext(ctx, "PUT", url, strings.NewReader("body"))
	case 2:
		req, _ = http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("body"))
		req.Header.Set("Idempotency-Key", "k")
	}
	req.Header.Set("X-Call", id)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return
	}
	if rng.IntN(2) == 0 {
		io.Copy(io.Discard, resp.Body)
	} else {
		resp.Body.Read(make([]byte, 1))
	}
	resp.Body.Close()
}

// A healthy server (fast or slow answers, never a failure) under a hedge
// storm with random caller cancels: no attempt's outcome is a failure a
// breaker counts, and a real breaker never opens.
func TestHedgingHealthyStormNeverOpensBreaker(t *testing.T) {
	var handlers atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Add(-1)
		io.Copy(io.Discard, r.Body)
		if rand.IntN(3) == 0 {
			select {
			case <-time.After(time.Duration(rand.IntN(5000)) * time.Microsecond):
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, strings.Repeat("y", 64))
	})
	const limit, maxHedges = 4, 2
	var opened atomic.Int32
	br, err := breaker.New(breaker.Config{Name: "dep", ConsecutiveFailures: 3, OpenTimeout: time.Millisecond,
		OnStateChange: func(from, to breaker.State) {
			if to == breaker.Open {
				opened.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { br.Close() })
	seen := &outcomes{}
	bh := newBulkhead(t, limit*(1+maxHedges), 64)
	tr := &httppolicy.Transport{
		Base:   newBase(t, limit*(1+maxHedges)),
		Policy: newPipeline(t, compose.Policies{Bulkhead: bh, Breaker: seen, Attempt: br}),
	}
	hg := hedging(newHedge(t, time.Millisecond, maxHedges, nil), tr)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range 40 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if rng.IntN(3) == 0 {
					time.AfterFunc(time.Duration(rng.IntN(3000))*time.Microsecond, cancel)
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
				if resp, err := hg.RoundTrip(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				} else if !errors.Is(err, context.Canceled) {
					t.Errorf("RoundTrip: %v", err)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	waitFor(t, "the handlers to end", func() bool { return handlers.Load() == 0 })
	waitFor(t, "the slots to be free", func() bool { return bh.Active() == 0 })
	bad := map[string]int{}
	for _, e := range seen.get() {
		if e != nil && !errors.Is(e, context.Canceled) {
			bad[e.Error()]++
		}
	}
	if opened.Load() > 0 || len(bad) > 0 {
		t.Errorf("a healthy dependency: breaker opened %d times; failures counted: %v", opened.Load(), bad)
	}
}

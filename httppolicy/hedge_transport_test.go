package httppolicy_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// Tests of hedging through the Transport: streams, cancellation, losers,
// panics and failures; each is named for the behaviour it checks.

// hedgeBudget returns a hedge whose OnHedge counts the hedges it starts,
// drawing on a budget of its own, and that budget.
func hedgeBudget(t *testing.T, delay time.Duration, maxHedges int, hedges *atomic.Int32) (*retry.Hedge, *retry.Budget) {
	t.Helper()
	budget, err := retry.NewBudget(retry.BudgetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := retry.NewHedge(retry.HedgeConfig{Delay: delay, MaxHedges: maxHedges, Budget: budget,
		OnHedge: func(context.Context, int, bool) { hedges.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	return h, budget
}

// Once a response is accepted, the hedge starts no more attempts while the
// caller reads its stream: its timer starts no hedge, calls no OnHedge and
// takes nothing from the retry budget.
// A request that may not be hedged (a POST without a key) starts none
// either, even before its response: its attempt claims the hedge as it
// enters.
func TestHedgeNoPhantomHedgesDuringStream(t *testing.T) {
	for _, method := range []string{"GET", "POST"} {
		t.Run(method, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
					if method == "POST" {
						time.Sleep(50 * time.Millisecond) // headers after several hedge delays
					} else {
						time.Sleep(time.Millisecond)
					}
					resp, b := fedResponse(req, 200, "", false, step{0, "a"}, step{100 * time.Millisecond, "b"})
					return resp, b, nil
				}}
				var hedges atomic.Int32
				h, budget := hedgeBudget(t, 10*time.Millisecond, 3, &hedges)
				before := budget.Available()
				tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Retry: h})}
				req, _ := http.NewRequest(method, "http://dep.test/", nil)
				resp, err := tr.RoundTrip(req)
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
		})
	}
}

// A caller canceling just as the hedge's timer fires: the hedge's late
// attempt finds the call over and returns its context's error, which a
// breaker excludes. Before, it returned errDone, and a breaker with
// ConsecutiveFailures 1 opened.
func TestHedgeCancelAsHedgeFires(t *testing.T) {
	for i := range 20 {
		synctest.Test(t, func(t *testing.T) {
			base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
				r, err := waitHeaders(req)
				return r, nil, err
			}}
			br := newBreaker(t, 1)
			seen := &outcomes{}
			tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{
				Retry: newHedge(t, 10*time.Millisecond, 1, nil), Breaker: seen, Attempt: br,
			})}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			time.AfterFunc(10*time.Millisecond, cancel)
			if _, err := get(t, tr, ctx); !errors.Is(err, context.Canceled) {
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

// A healthy server (fast or slow answers, never a failure) under a hedge
// storm with random caller cancels: no attempt's outcome is a failure a
// breaker counts, and a real breaker never opens.
func TestHedgeHealthyStormNeverOpensBreaker(t *testing.T) {
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
	bh := newBulkhead(t, limit, 64)
	tr := &httppolicy.Transport{
		Base: newBase(t, limit*(1+maxHedges)),
		Policy: newPipeline(t, compose.Policies{
			Bulkhead: bh, Retry: newHedge(t, time.Millisecond, maxHedges, nil), Breaker: seen, Attempt: br,
		}),
	}
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
				if resp, err := tr.RoundTrip(req); err == nil {
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

// A Transport whose own policy does not hedge, called from an attempt of a
// hedge further out (a pipeline's Execute around an HTTP call), must not
// take the outer hedge's claim when its response headers arrive: before,
// it did, and the outer hedge's fast attempt could not win (its inner
// RoundTrip failed with "returned without sending the request").
func TestHedgeOuterClaimNotTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			if n == 1 { // headers at once, body slow
				resp, b := fedResponse(req, 200, "", false, step{0, "a"}, step{200 * time.Millisecond, "b"})
				return resp, b, nil
			}
			resp, b := fedResponse(req, 200, "", false, step{0, "fast"})
			return resp, b, nil
		}}
		inner := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Breaker: newBreaker(t, 100)})}
		client := &http.Client{Transport: inner}
		outer := newPipeline(t, compose.Policies{Retry: newHedge(t, 10*time.Millisecond, 1, nil)})
		var failures atomic.Int32
		var winner atomic.Value
		start := time.Now()
		// Execute, not policy.Do (which hides the claim from its fn): the
		// attempt's context carries the outer hedge's claim.
		err := outer.Execute(context.Background(), func(ctx context.Context) error {
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://dep.test/", nil)
			resp, err := client.Do(req)
			if err != nil {
				failures.Add(1)
				return err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil && policy.Claim(ctx) {
				winner.Store(string(b))
			}
			return err
		})
		got, _ := winner.Load().(string)
		if err != nil || got != "fast" || failures.Load() != 0 {
			t.Errorf("got %q, err %v, %d inner failures: want the hedge's fast answer", got, err, failures.Load())
		}
		if d := time.Since(start); d != 10*time.Millisecond {
			t.Errorf("the call took %v, want 10ms (the hedge's answer came at once)", d)
		}
	})
}

// A loser canceled by the winner returns at once, not once the winner's
// stream ends: before, it waited, its own Attempt timeout fired meanwhile,
// and a breaker (ConsecutiveFailures 1) counted it and opened.
func TestHedgeLoserReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			if n == 1 {
				r, err := waitHeaders(req)
				return r, nil, err
			}
			resp, b := fedResponse(req, 200, "", false, step{0, "a"}, step{40 * time.Millisecond, "b"})
			return resp, b, nil
		}}
		br := newBreaker(t, 1)
		bh := newBulkhead(t, 1, 0)
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{
			Bulkhead: bh, Retry: newHedge(t, 30*time.Millisecond, 1, nil), Breaker: br, Attempt: newDeadline(t, 50*time.Millisecond),
		})}
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp.Body); got != "ab" {
			t.Errorf("body %q, want ab", got)
		}
		resp.Body.Close()
		synctest.Wait()
		if br.State() != breaker.Closed || base.count() != 2 || bh.Active() != 0 || !base.allClosed() {
			t.Errorf("breaker %v, %d requests, Active %d, all closed %v: want closed, 2, 0, true",
				br.State(), base.count(), bh.Active(), base.allClosed())
		}
	})
}

// A hedge whose GetBody fails waits for the running attempt instead of
// ending the call: the first attempt's 200 is the caller's, and the
// failure to copy the body is no failure of the dependency. Before, the
// call ended with the GetBody error and the breaker opened.
func TestHedgeGetBodyErrorWaitsForTheRunningAttempt(t *testing.T) {
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
		seen := &outcomes{}
		var getBody atomic.Int32
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{
			Retry: newHedge(t, 10*time.Millisecond, 2, nil), Breaker: seen, Attempt: br,
		})}
		req, _ := http.NewRequest("POST", "http://dep.test/", strings.NewReader("payload"))
		req.Header.Set("Idempotency-Key", "k")
		req.GetBody = func() (io.ReadCloser, error) {
			getBody.Add(1)
			return nil, errors.New("spool gone")
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("RoundTrip: %v; breaker %v", err, br.State())
		}
		if got := readAll(t, resp.Body); got != "ok" {
			t.Errorf("body %q, want ok", got)
		}
		resp.Body.Close()
		synctest.Wait()
		if br.State() != breaker.Closed || base.count() != 1 || getBody.Load() != 1 {
			t.Errorf("breaker %v, %d requests, GetBody called %d times: want closed, 1, 1", br.State(), base.count(), getBody.Load())
		}
		for _, e := range seen.get() {
			if e != nil && !errors.Is(e, context.Canceled) {
				t.Errorf("an attempt returned %v to the breaker", e)
			}
		}
	})
}

// A loser whose base transport ignores its context (a deaf SDK, a stuck
// dial) does not delay the winner: RoundTrip returns, and the body's Close
// returns, as soon as the winner's response is in and read; the loser's
// resources are freed when it returns.
func TestHedgeDeafLoserDoesNotDelayWinner(t *testing.T) {
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
				bh := newBulkhead(t, 1, 0)
				tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{
					Bulkhead: bh, Retry: newHedge(t, 10*time.Millisecond, 1, nil),
				})}
				start := time.Now()
				resp, err := get(t, tr, context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if d := time.Since(start); d != 10*time.Millisecond {
					t.Errorf("RoundTrip returned after %v, want 10ms", d)
				}
				readAll(t, resp.Body)
				resp.Body.Close()
				if d := time.Since(start); d != 10*time.Millisecond {
					t.Errorf("the body was read and closed after %v, want 10ms", d)
				}
				if bh.Active() != 0 {
					t.Errorf("Active %d after the winner's body was closed", bh.Active())
				}
				<-deafDone
				synctest.Wait()
				if !base.allClosed() {
					t.Errorf("a body left open")
				}
			})
		})
	}
}

// slowFirst is a policy for the Breaker slot that returns attempt 1's
// result late, so that the hedge learns of the attempts' failures in
// another order than their responses came.
type slowFirst struct{}

func (slowFirst) Execute(ctx context.Context, fn policy.Func) error {
	err := fn(ctx)
	if retry.Attempt(ctx) == 1 {
		time.Sleep(5 * time.Millisecond)
	}
	return err
}

// Every attempt fails with a status, in an order the hedge learns
// differently: the caller still gets the response the hedge's error names
// (the last it learned of). Before, the exchange kept only the last
// response to arrive, and the caller got an error.
func TestHedgeAllFailReturnsTheLastResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			if n == 1 {
				time.Sleep(20 * time.Millisecond)
			} else {
				time.Sleep(11 * time.Millisecond)
			}
			resp, b := fedResponse(req, 503, "", false, step{0, "busy" + string(rune('0'+n))})
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{
			Retry: newHedge(t, 10*time.Millisecond, 1, nil), Breaker: slowFirst{},
		})}
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatalf("err %v: want the last 503 response", err)
		}
		if got := readAll(t, resp.Body); resp.StatusCode != 503 || got != "busy1" {
			t.Errorf("status %d body %q, want 503 busy1 (attempt 1's result reached the hedge last)", resp.StatusCode, got)
		}
		resp.Body.Close()
		synctest.Wait()
		if !base.allClosed() {
			t.Errorf("a body left open")
		}
	})
}

// A Signals that panics on a losing response while the winner streams: the
// winner's stream goes on, and the panic is reported to otel.Handle.
// Before, the hedge carried it to the caller's goroutine, canceling the
// winner's stream.
func TestHedgeSignalsPanicInLoser(t *testing.T) {
	rec := &handled{}
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(rec)
	defer otel.SetErrorHandler(prev)
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			if n == 1 {
				time.Sleep(20 * time.Millisecond) // deaf to its context, then answers
				resp, b := fedResponse(req.WithContext(context.WithoutCancel(req.Context())), 200, "", false, step{0, "slow"})
				return resp, b, nil
			}
			resp, b := fedResponse(req, 200, "", false, step{0, "a"}, step{50 * time.Millisecond, "b"})
			return resp, b, nil
		}}
		var seen atomic.Int32
		bh := newBulkhead(t, 1, 0)
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{
			Bulkhead: bh, Retry: newHedge(t, 10*time.Millisecond, 1, nil),
		}), Signals: signalsFunc(func(*http.Response) {
			if seen.Add(1) == 2 {
				panic("signals on the loser")
			}
		})}
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		synctest.Wait()
		if err != nil || string(b) != "ab" {
			t.Errorf("the winner's body %q, err %v: want ab, nil", b, err)
		}
		if bh.Active() != 0 || !base.allClosed() {
			t.Errorf("Active %d, all closed %v", bh.Active(), base.allClosed())
		}
	})
	if errs := rec.get(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "httppolicy: panic in an attempt that lost to another's: signals on the loser") {
		t.Errorf("otel.Handle got %v, want the loser's panic", errs)
	}
}

// A base transport that panics in a losing attempt, after the winner's
// response was accepted: the winner's stream goes on, and the panic is
// reported to otel.Handle.
func TestHedgeBasePanicInLoser(t *testing.T) {
	rec := &handled{}
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(rec)
	defer otel.SetErrorHandler(prev)
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			if n == 1 {
				time.Sleep(20 * time.Millisecond) // deaf to its context
				panic("base on the loser")
			}
			resp, b := fedResponse(req, 200, "", false, step{0, "a"}, step{50 * time.Millisecond, "b"})
			return resp, b, nil
		}}
		bh := newBulkhead(t, 1, 0)
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{
			Bulkhead: bh, Retry: newHedge(t, 10*time.Millisecond, 1, nil),
		})}
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		synctest.Wait()
		if err != nil || string(b) != "ab" {
			t.Errorf("the winner's body %q, err %v: want ab, nil", b, err)
		}
		if bh.Active() != 0 || !base.allClosed() {
			t.Errorf("Active %d, all closed %v", bh.Active(), base.allClosed())
		}
	})
	if errs := rec.get(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "base on the loser") {
		t.Errorf("otel.Handle got %v, want the loser's panic", errs)
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

package httppolicy_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
)

// A pipeline of the module's policies that never runs attempts
// concurrently runs on RoundTrip's goroutine, the handed over response
// holding the call until the body ends (no goroutine per request); any other policy runs on
// a goroutine of the Transport's.

func goroutineID() string {
	var buf [64]byte
	s := string(buf[:runtime.Stack(buf[:], false)])
	return strings.Fields(s)[1]
}

type goroutineSignals struct{ id atomic.Value }

func (s *goroutineSignals) Observe(*http.Response) { s.id.Store(goroutineID()) }

func TestPipelineRunsOnCallersGoroutine(t *testing.T) {
	for _, tt := range []struct {
		name  string
		pol   func(t *testing.T) policy.Policy
		onOwn bool
	}{
		{"pipeline", func(t *testing.T) policy.Policy {
			return newPipeline(t, compose.Policies{Bulkhead: newBulkhead(t, 1, 0), Retry: newRetry(t, 2, nil), Breaker: newBreaker(t, 5)})
		}, true},
		{"user policy", func(t *testing.T) policy.Policy { return &plainPolicy{} }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sig := &goroutineSignals{}
				base := &feedBase{fn: func(_ int, req *http.Request) (*http.Response, *feedBody, error) {
					resp, b := fedResponse(req, 200, "", false, step{0, "a"}, step{time.Second, "b"})
					return resp, b, nil
				}}
				tr := &httppolicy.Transport{Base: base, Policy: tt.pol(t), Signals: sig}
				req, _ := http.NewRequest("GET", "http://dep/", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				if got := readAll(t, resp.Body); got != "ab" {
					t.Errorf("body %q", got)
				}
				resp.Body.Close()
				if on := sig.id.Load() == goroutineID(); on != tt.onOwn {
					t.Errorf("attempt ran on the caller's goroutine: %v, want %v", on, tt.onOwn)
				}
			})
		})
	}
}

// pipelineFixture is a pipeline of bulkhead (1 slot), deadline (1 min),
// retry (2 attempts) and breaker (opens at the first failure) over a fed
// base.
type pipelineFixture struct {
	bh   *bulkhead.Bulkhead
	br   *breaker.Breaker
	base *feedBase
	tr   *httppolicy.Transport
}

func newPipelineFixture(t *testing.T, withDeadline bool, fn func(n int, req *http.Request) (*http.Response, *feedBody, error)) *pipelineFixture {
	f := &pipelineFixture{bh: newBulkhead(t, 1, 0), br: newBreaker(t, 1), base: &feedBase{fn: fn}}
	pols := compose.Policies{Bulkhead: f.bh, Retry: newRetry(t, 2, nil), Breaker: f.br}
	if withDeadline {
		pols.Deadline = newDeadline(t, time.Minute)
	}
	f.tr = &httppolicy.Transport{Base: f.base, Policy: newPipeline(t, pols)}
	return f
}

func (f *pipelineFixture) get(t *testing.T, ctx context.Context) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://dep/", nil)
	resp, err := f.tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if f.bh.Active() != 1 {
		t.Fatalf("Active %d while the body streams, want 1", f.bh.Active())
	}
	return resp
}

func streaming(n int, req *http.Request) (*http.Response, *feedBody, error) {
	resp, b := fedResponse(req, 200, "", false, step{0, "a"}, step{time.Second, "b"})
	return resp, b, nil
}

func hanging(n int, req *http.Request) (*http.Response, *feedBody, error) {
	resp, b := fedResponse(req, 200, "", true, step{0, "a"})
	return resp, b, nil
}

// errBody is a body whose second Read fails.
type errBody struct{ reads int }

var errReset = errors.New("connection reset")

func (b *errBody) Read(p []byte) (int, error) {
	b.reads++
	if b.reads == 1 {
		return copy(p, "a"), nil
	}
	return 0, errReset
}

func (b *errBody) Close() error { return nil }

func TestPipelineCallEndsWithTheBodyOrItsContext(t *testing.T) {
	t.Run("by EOF", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newPipelineFixture(t, true, streaming)
			resp := f.get(t, context.Background())
			if got := readAll(t, resp.Body); got != "ab" {
				t.Errorf("body %q", got)
			}
			// The Read that returned EOF returned once the call had ended.
			if f.bh.Active() != 0 || f.br.Counts().TotalSuccesses != 1 {
				t.Errorf("Active %d, counts %+v; want 0 and one success", f.bh.Active(), f.br.Counts())
			}
			resp.Body.Close()
		})
	})
	t.Run("by Close", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newPipelineFixture(t, true, streaming)
			resp := f.get(t, context.Background())
			resp.Body.Read(make([]byte, 1))
			resp.Body.Close()
			if f.bh.Active() != 0 || f.br.Counts().TotalSuccesses != 1 {
				t.Errorf("Active %d, counts %+v; want 0 and one success (closing early is no failure)", f.bh.Active(), f.br.Counts())
			}
			if _, err := resp.Body.Read(make([]byte, 1)); !errors.Is(err, http.ErrBodyReadAfterClose) {
				t.Errorf("Read after Close = %v", err)
			}
		})
	})
	t.Run("by a Read error", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newPipelineFixture(t, true, func(n int, req *http.Request) (*http.Response, *feedBody, error) {
				return &http.Response{StatusCode: 200, Header: http.Header{}, Body: &errBody{}, ContentLength: -1, Request: req}, nil, nil
			})
			resp := f.get(t, context.Background())
			_, err := io.ReadAll(resp.Body)
			if !errors.Is(err, errReset) {
				t.Fatalf("Read error %v, want the stream's", err)
			}
			if f.bh.Active() != 0 || f.br.State() != breaker.Open || f.base.count() != 1 {
				t.Errorf("Active %d, breaker %v, %d requests; want 0, open, 1 (a broken stream is a failure, never retried)",
					f.bh.Active(), f.br.State(), f.base.count())
			}
			resp.Body.Close()
		})
	})
	t.Run("by the caller's cancellation, body dropped", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newPipelineFixture(t, false, hanging)
			ctx, cancel := context.WithCancel(context.Background())
			resp := f.get(t, ctx)
			cancel()
			synctest.Wait()
			if f.bh.Active() != 0 {
				t.Errorf("Active %d after the cancellation, want 0", f.bh.Active())
			}
			resp.Body.Close()
		})
	})
}

// A caller that drops the body without closing it: the deadline still
// ends the call (the slot is freed, the breaker counts the timeout), and
// a late Read returns the deadline's error. Without a deadline or a
// cancellation, nothing can end the call: the slot is held until the body
// is closed, as the goroutine that held the call before would have been.
func TestDroppedBody(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newPipelineFixture(t, true, hanging)
			resp := f.get(t, context.Background())
			time.Sleep(time.Minute + time.Second)
			synctest.Wait()
			if f.bh.Active() != 0 || f.br.State() != breaker.Open {
				t.Errorf("Active %d, breaker %v after the deadline; want 0, open", f.bh.Active(), f.br.State())
			}
			_, err := io.ReadAll(resp.Body)
			if !errors.Is(err, deadline.ErrExceeded) {
				t.Errorf("late Read error %v, want deadline.ErrExceeded", err)
			}
			resp.Body.Close()
		})
	})
	t.Run("no deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newPipelineFixture(t, false, hanging)
			resp := f.get(t, context.Background())
			time.Sleep(time.Hour)
			synctest.Wait()
			if f.bh.Active() != 1 {
				t.Errorf("Active %d, want the slot still held", f.bh.Active())
			}
			resp.Body.Close()
			if f.bh.Active() != 0 {
				t.Errorf("Active %d after Close, want 0", f.bh.Active())
			}
		})
	})
}

type errorRecorder struct {
	mu   sync.Mutex
	errs []error
}

func (r *errorRecorder) Handle(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

// A user hook that panics in a policy's exit at the call's resumption (the
// breaker opening as the stream breaks) is reported to otel.Handle, and
// the policies outside it still free what they hold.
func TestHookPanicAtResumeIsReported(t *testing.T) {
	rec := &errorRecorder{}
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(rec)
	defer otel.SetErrorHandler(prev)
	synctest.Test(t, func(t *testing.T) {
		br, err := breaker.New(breaker.Config{Name: "up", ConsecutiveFailures: 1,
			OnStateChange: func(from, to breaker.State) { panic("hook") }})
		if err != nil {
			t.Fatal(err)
		}
		defer br.Close()
		bh := newBulkhead(t, 1, 0)
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: &errBody{}, ContentLength: -1, Request: req}, nil, nil
		}}
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Bulkhead: bh, Deadline: newDeadline(t, time.Minute), Breaker: br})}
		req, _ := http.NewRequest("GET", "http://dep/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(resp.Body); !errors.Is(err, errReset) {
			t.Errorf("Read error %v", err)
		}
		resp.Body.Close()
		if bh.Active() != 0 {
			t.Errorf("Active %d after the hook's panic, want 0", bh.Active())
		}
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.errs) != 1 || !strings.Contains(rec.errs[0].Error(), "httppolicy: panic in a policy after the response was returned: hook") {
		t.Errorf("otel.Handle got %v", rec.errs)
	}
}

// panicSignals panics on the responses whose X-Panic header is set.
type panicSignals struct{}

func (panicSignals) Observe(resp *http.Response) {
	if resp.Header.Get("X-Panic") != "" {
		panic("signals exploded")
	}
}

// TestPipelineCallsEndUnderAStorm races the ways a held call ends: EOF, Close from
// another goroutine while a Read waits, a Read error, the caller's
// cancellation, a short deadline on a body never read nor closed, the idle
// timeout, and panics in Signals before the hand-over. Every slot must be
// freed, every waiter gone (goleak), and -race must find nothing.
func TestPipelineCallsEndUnderAStorm(t *testing.T) {
	const limit, workers, perWorker = 3, 24, 25
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			q := req.URL.Query()
			var resp *http.Response
			var b *feedBody
			switch q.Get("kind") {
			case "broken":
				return &http.Response{StatusCode: 200, Header: http.Header{}, Body: &errBody{}, ContentLength: -1, Request: req}, nil, nil
			case "hang":
				resp, b = fedResponse(req, 200, "", true, step{0, "a"})
			case "fail":
				resp, b = fedResponse(req, 503, "", false, step{0, "no"})
			default:
				ms, _ := strconv.Atoi(q.Get("ms"))
				resp, b = fedResponse(req, 200, "", false, step{0, "a"}, step{time.Duration(ms) * time.Millisecond, "b"}, step{time.Millisecond, "c"})
			}
			if q.Get("panic") != "" {
				resp.Header.Set("X-Panic", "1")
			}
			return resp, b, nil
		}}
		bh, err := bulkhead.New(bulkhead.Config{Name: "dep", Limit: limit, MaxQueue: bulkhead.Unbounded})
		if err != nil {
			t.Fatal(err)
		}
		defer bh.Close()
		tr := &httppolicy.Transport{Base: base, Signals: panicSignals{}, IdleTimeout: 300 * time.Millisecond,
			Policy: newPipeline(t, compose.Policies{
				Bulkhead: bh, Deadline: newDeadline(t, 2*time.Second), Retry: newRetry(t, 2, nil),
				Breaker: newBreaker(t, 1<<30), Attempt: newDeadline(t, time.Second),
			})}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 11))
				for range perWorker {
					kind := []string{"ok", "ok", "ok", "hang", "broken", "fail"}[rng.IntN(6)]
					url := "http://dep/?kind=" + kind + "&ms=" + strconv.Itoa(rng.IntN(500))
					if rng.IntN(8) == 0 {
						url += "&panic=1"
					}
					ctx, cancel := context.WithCancel(context.Background())
					req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
					if rng.IntN(12) == 0 {
						cancel()
					}
					resp, panicked := roundTripRecover(tr, req)
					if panicked || resp == nil {
						cancel()
						continue
					}
					switch rng.IntN(5) {
					case 0, 1: // to the end (or the idle timeout, or the deadline)
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					case 2: // closed by another goroutine while a Read waits
						done := make(chan struct{})
						go func() {
							defer close(done)
							io.Copy(io.Discard, resp.Body)
						}()
						time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
						resp.Body.Close()
						<-done
					case 3: // canceled mid-stream, then read and closed
						resp.Body.Read(make([]byte, 1))
						cancel()
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					case 4: // dropped: the deadline or the cancellation ends the call
						if rng.IntN(2) == 0 {
							cancel()
						}
					}
					cancel()
				}
			})
		}
		wg.Wait()
		// Dropped bodies end by the deadline at the latest.
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if bh.Active() != 0 || bh.Queued() != 0 {
			t.Fatalf("Active %d, Queued %d after the storm", bh.Active(), bh.Queued())
		}
		if n := base.count(); n < workers*perWorker/2 {
			t.Fatalf("only %d requests reached the base", n)
		}
	})
}

// roundTripRecover sends req and reports whether RoundTrip panicked (a
// panic in Signals reaches the caller), checking the panic's value.
func roundTripRecover(tr *httppolicy.Transport, req *http.Request) (resp *http.Response, panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != "signals exploded" {
				panic(v)
			}
			panicked = true
		}
	}()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, false
	}
	return resp, false
}

// A panic in Signals or IsFailure reaches RoundTrip's caller with its
// value once every policy has freed what it holds and the response's body
// is closed; runtime.Goexit there (a test's t.FailNow) ends the caller's
// goroutine the same way. Both under a pipeline that holds and under a
// policy run on the Transport's goroutine.
func TestPanicAndGoexitReachCaller(t *testing.T) {
	for _, mode := range []string{"pipeline", "bulkhead"} {
		t.Run(mode, func(t *testing.T) { testPanicAndGoexit(t, mode == "pipeline") })
	}
}

func testPanicAndGoexit(t *testing.T, pipeline bool) {
	for _, tt := range []struct {
		name      string
		signals   httppolicy.Signals
		isFailure func(*http.Response) bool
		goexit    bool
	}{
		{name: "Signals panics", signals: panicSignals{}},
		{name: "IsFailure panics", isFailure: func(*http.Response) bool { panic("signals exploded") }},
		{name: "IsFailure calls Goexit", isFailure: func(*http.Response) bool { runtime.Goexit(); return false }, goexit: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bh := newBulkhead(t, 1, 0)
				base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
					resp, b := fedResponse(req, 200, "", false, step{0, "a"})
					resp.Header.Set("X-Panic", "1")
					return resp, b, nil
				}}
				var pol policy.Policy = bh
				if pipeline {
					pol = newPipeline(t, compose.Policies{Bulkhead: bh, Deadline: newDeadline(t, time.Minute), Retry: newRetry(t, 2, nil)})
				}
				tr := &httppolicy.Transport{Base: base, Signals: tt.signals, IsFailure: tt.isFailure, Policy: pol}
				body := &trackBody{r: strings.NewReader("request")}
				req, _ := http.NewRequest("POST", "http://dep/", body)
				var recovered any
				returned := false
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() { recovered = recover() }()
					tr.RoundTrip(req)
					returned = true
				}()
				<-done
				switch {
				case returned:
					t.Fatal("RoundTrip returned")
				case tt.goexit && recovered != nil:
					t.Fatalf("recovered %v, want the goroutine to exit", recovered)
				case !tt.goexit && recovered != "signals exploded":
					t.Fatalf("recovered %v", recovered)
				}
				if bh.Active() != 0 || !base.allClosed() || !body.closed.Load() {
					t.Errorf("Active %d, response bodies closed %v, request body closed %v", bh.Active(), base.allClosed(), body.closed.Load())
				}
			})
		})
	}
}

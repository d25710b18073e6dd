package httppolicy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
)

// isStreamTimeout checks that err is the stream timeout sentinel and a
// timeout in both usual senses.
func isStreamTimeout(t *testing.T, err, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) || !errors.Is(err, deadline.ErrExceeded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v; want it to match %v, deadline.ErrExceeded and context.DeadlineExceeded", err, sentinel)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v matches context.Canceled: a breaker would not count it", err)
	}
}

func get(t *testing.T, rt http.RoundTripper, ctx context.Context) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://dep.test/", nil)
	return rt.RoundTrip(req)
}

func TestFirstByteTimeoutRetried(t *testing.T) {
	tests := []struct {
		name  string
		ct    string
		first []step // what the first attempt's body sends before it hangs
	}{
		{"silent body", "application/json", nil},
		{"comment keepalives", "text/event-stream", []step{{0, commentPing}, {time.Second, commentPing}, {time.Second, commentPing}}},
		{"anthropic ping events", "text/event-stream; charset=utf-8", []step{{0, anthropicPing}, {time.Second, "event: ping\r\n"}, {0, "data: {\"type\": \"ping\"}\r\n\r\n"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var retries atomic.Int32
				base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
					if n == 1 {
						resp, b := fedResponse(req, 200, tt.ct, true, tt.first...)
						return resp, b, nil
					}
					resp, b := fedResponse(req, 200, tt.ct, false, step{0, openaiChunk}, step{time.Second, anthropicText})
					return resp, b, nil
				}}
				bh := newBulkhead(t, 1, 0)
				tr := &httppolicy.Transport{Base: base, FirstByteTimeout: 5 * time.Second,
					Policy: newPipeline(t, compose.Policies{Bulkhead: bh, Retry: newRetry(t, 3, &retries)})}
				start := time.Now()
				resp, err := get(t, tr, context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if el := time.Since(start); el < 5*time.Second {
					t.Fatalf("response handed over after %v, before the first attempt timed out", el)
				}
				body := readAll(t, resp.Body)
				resp.Body.Close()
				// The caller sees the second attempt's stream, once, and
				// nothing of the first.
				if want := openaiChunk + anthropicText; body != want {
					t.Fatalf("body = %q, want %q", body, want)
				}
				if base.count() != 2 || retries.Load() != 1 {
					t.Fatalf("%d attempts, %d retries; want 2, 1", base.count(), retries.Load())
				}
				if !base.allClosed() || bh.Active() != 0 {
					t.Fatalf("bodies closed %v, Active %d", base.allClosed(), bh.Active())
				}
			})
		})
	}
}

func TestFirstByteTimeoutRetryRules(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		key     bool
		unsafe  bool
		retried bool
	}{
		{"GET", "GET", false, false, true},
		{"POST", "POST", false, false, false},
		{"POST with Idempotency-Key", "POST", true, false, true},
		{"POST with RetryUnsafe", "POST", false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
					resp, b := fedResponse(req, 200, "", true) // headers, then nothing
					return resp, b, nil
				}}
				tr := &httppolicy.Transport{Base: base, FirstByteTimeout: time.Second, RetryUnsafe: tt.unsafe,
					Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)})}
				req, _ := http.NewRequest(tt.method, "http://dep.test/", strings.NewReader("{}"))
				if tt.key {
					req.Header.Set("Idempotency-Key", "k1")
				}
				resp, err := tr.RoundTrip(req)
				if resp != nil {
					t.Fatalf("got a response, status %d", resp.StatusCode)
				}
				isStreamTimeout(t, err, httppolicy.ErrFirstByteTimeout)
				want := 1
				if tt.retried {
					want = 3
				}
				if base.count() != want {
					t.Fatalf("%d attempts, want %d", base.count(), want)
				}
				if !base.allClosed() {
					t.Fatal("a timed-out attempt's body was left open")
				}
			})
		})
	}
}

func TestFirstByteTimeoutBeforeHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var attempts atomic.Int32
		tr := &httppolicy.Transport{FirstByteTimeout: time.Second,
			Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
				attempts.Add(1)
				return waitHeaders(req)
			}),
			Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 2, nil)})}
		start := time.Now()
		_, err := get(t, tr, context.Background())
		isStreamTimeout(t, err, httppolicy.ErrFirstByteTimeout)
		if attempts.Load() != 2 {
			t.Fatalf("%d attempts, want 2", attempts.Load())
		}
		if el := time.Since(start); el < 2*time.Second {
			t.Fatalf("gave up after %v", el)
		}
	})
}

func TestFirstByteTimeoutFailureStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A 503 whose body never comes: the late first byte, not the
		// status, is the failure, and the caller gets no half-read 503.
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 503, "text/plain", true)
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: time.Second,
			Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 2, nil)})}
		_, err := get(t, tr, context.Background())
		isStreamTimeout(t, err, httppolicy.ErrFirstByteTimeout)
		if base.count() != 2 || !base.allClosed() {
			t.Fatalf("%d attempts (want 2), all closed %v", base.count(), base.allClosed())
		}

		// A 503 whose body comes in time is the usual failure response.
		base.fn = func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 503, "text/plain", false, step{0, "busy"})
			return resp, b, nil
		}
		resp, err := get(t, tr, context.Background())
		if err != nil || resp.StatusCode != 503 || readAll(t, resp.Body) != "busy" {
			t.Fatalf("err %v, resp %v", err, resp)
		}
		resp.Body.Close()
	})
}

func TestFirstByteWholeBodyEndsCallAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "application/json", false, step{0, `{"ok":true}`})
			return resp, b, nil
		}}
		bh := newBulkhead(t, 1, 0)
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: time.Second, IdleTimeout: time.Second,
			Policy: newPipeline(t, compose.Policies{Bulkhead: bh})}
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// The body came with its end while the Transport waited for the
		// first byte: the call is over before the caller reads.
		if bh.Active() != 0 {
			t.Fatal("slot still held for a body already in memory")
		}
		time.Sleep(time.Minute) // a slow reader: no timer runs
		if got := readAll(t, resp.Body); got != `{"ok":true}` {
			t.Fatalf("body %q", got)
		}
		resp.Body.Close()
	})
}

func TestFirstByteNoBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &httppolicy.Transport{FirstByteTimeout: time.Second,
			Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: 204, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
			}),
			Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 2, nil)})}
		resp, err := get(t, tr, context.Background())
		if err != nil || resp.StatusCode != 204 {
			t.Fatalf("resp %v, err %v", resp, err)
		}
		resp.Body.Close()
		time.Sleep(2 * time.Second) // the disarmed timer does nothing
	})
}

func TestIdleTimeout(t *testing.T) {
	tests := []struct {
		name  string
		ct    string
		steps []step // after the first event: only keepalives, or nothing
	}{
		{"silence", "application/octet-stream", nil},
		{"silent SSE", "text/event-stream", nil},
		{"comment keepalives", "text/event-stream", []step{{time.Second, commentPing}, {time.Second, commentPing}, {time.Second, ": keepalive\r\n\r\n"}, {time.Second, commentPing}}},
		{"anthropic pings", "text/event-stream", []step{{time.Second, anthropicPing}, {1500 * time.Millisecond, "event: ping\n"}, {500 * time.Millisecond, "data: {}\n\n"}, {time.Second, anthropicPing}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const idle = 3 * time.Second
				base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
					steps := append([]step{{0, openaiChunk}}, tt.steps...)
					resp, b := fedResponse(req, 200, tt.ct, true, steps...)
					return resp, b, nil
				}}
				bh := newBulkhead(t, 1, 0)
				br := newBreaker(t, 5)
				tr := &httppolicy.Transport{Base: base, FirstByteTimeout: time.Second, IdleTimeout: idle,
					Policy: newPipeline(t, compose.Policies{Bulkhead: bh, Retry: newRetry(t, 3, nil), Breaker: br})}
				resp, err := get(t, tr, context.Background())
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				lastEvent := time.Now()
				got, err := io.ReadAll(resp.Body)
				isStreamTimeout(t, err, httppolicy.ErrIdleTimeout)
				// Keepalives do not restart the timer; only the time Reads
				// waited counts, and here the reader never paused.
				if el := time.Since(lastEvent); el != idle {
					t.Fatalf("idle timeout after %v since the last event, want %v", el, idle)
				}
				if !strings.HasPrefix(string(got), openaiChunk) {
					t.Fatalf("read %q", got)
				}
				// The call ended as a failure, and nothing was retried.
				if base.count() != 1 || bh.Active() != 0 {
					t.Fatalf("%d attempts, Active %d; want 1, 0", base.count(), bh.Active())
				}
				if c := br.Counts(); c.TotalFailures != 1 || c.TotalExclusions != 0 {
					t.Fatalf("breaker counts %+v, want one failure", c)
				}
				// Further reads keep failing the same way.
				if _, err := resp.Body.Read(make([]byte, 8)); !errors.Is(err, httppolicy.ErrIdleTimeout) {
					t.Fatalf("read after the timeout: %v", err)
				}
			})
		})
	}
}

func TestIdleTimeoutSlowReaderAndLiveStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = time.Second
		// Events every 0.9 s for 20 s, keepalives in between: the timer is
		// restarted by each event.
		var steps []step
		for range 22 {
			steps = append(steps, step{450 * time.Millisecond, commentPing}, step{450 * time.Millisecond, anthropicText})
		}
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "text/event-stream", false, steps...)
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, IdleTimeout: idle, Policy: newPipeline(t, compose.Policies{})}
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(t, resp.Body)
		resp.Body.Close()
		if n := strings.Count(got, anthropicText); n != 22 {
			t.Fatalf("%d events, want 22", n)
		}

		// A reader that pauses far longer than the timeout between reads,
		// with the data waiting for it: the timer runs only while a Read
		// waits.
		base.fn = func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "text/event-stream", false, step{0, openaiChunk}, step{0, commentPing}, step{0, openaiChunk})
			return resp, b, nil
		}
		resp, err = get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		buf := make([]byte, 16)
		var total int
		for {
			time.Sleep(10 * idle)
			n, err := resp.Body.Read(buf)
			total += n
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("slow reader failed: %v", err)
			}
		}
		if want := 2*len(openaiChunk) + len(commentPing); total != want {
			t.Fatalf("read %d bytes, want %d", total, want)
		}
	})
}

func TestStreamTimeoutsCountedByBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			if n == 1 {
				resp, b := fedResponse(req, 200, "", true) // late first byte
				return resp, b, nil
			}
			resp, b := fedResponse(req, 200, "", true, step{0, "x"}) // stalls after one byte
			return resp, b, nil
		}}
		br := newBreaker(t, 2)
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: time.Second, IdleTimeout: time.Second,
			Policy: newPipeline(t, compose.Policies{Breaker: br})}
		_, err := get(t, tr, context.Background())
		isStreamTimeout(t, err, httppolicy.ErrFirstByteTimeout)
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		isStreamTimeout(t, err, httppolicy.ErrIdleTimeout)
		if br.State() != breaker.Open {
			t.Fatalf("breaker %v after a late first byte and a stalled stream, want open", br.State())
		}
		_, err = get(t, tr, context.Background())
		if !errors.Is(err, policy.ErrRejected) {
			t.Fatalf("third call: %v, want a rejection", err)
		}

		// The caller's own cancellation mid-stream is not the dependency's
		// failure.
		br.Reset()
		base.fn = func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "", true, step{0, "x"})
			return resp, b, nil
		}
		for range 3 {
			ctx, cancel := context.WithCancel(context.Background())
			resp, err := get(t, tr, ctx)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				time.Sleep(500 * time.Millisecond)
				cancel()
			}()
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if !errors.Is(err, context.Canceled) || errors.Is(err, httppolicy.ErrIdleTimeout) {
				t.Fatalf("canceled mid-stream: %v", err)
			}
		}
		if c := br.Counts(); br.State() != breaker.Closed || c.TotalFailures != 0 {
			t.Fatalf("breaker %v %+v after caller cancellations", br.State(), c)
		}
	})
}

func TestAttemptDeadlineStillBoundsStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var steps []step
		for range 100 {
			steps = append(steps, step{time.Second, openaiChunk})
		}
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "text/event-stream", false, steps...)
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
			Policy: newPipeline(t, compose.Policies{Attempt: namedDeadline(t, "attempt", 10*time.Second)})}
		start := time.Now()
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		var ee *deadline.ExceededError
		if !errors.As(err, &ee) || ee.Name != "attempt" || errors.Is(err, httppolicy.ErrIdleTimeout) {
			t.Fatalf("err = %v, want the attempt deadline's", err)
		}
		if el := time.Since(start); el != 10*time.Second {
			t.Fatalf("stream cut after %v, want 10s", el)
		}
	})
}

func TestStreamBodyClosedEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "text/event-stream", true, step{0, openaiChunk})
			return resp, b, nil
		}}
		bh := newBulkhead(t, 1, 0)
		br := newBreaker(t, 1)
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: time.Second, IdleTimeout: time.Second,
			Policy: newPipeline(t, compose.Policies{Bulkhead: bh, Breaker: br})}
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatal(err)
		}
		// Closed while a Read waits on another goroutine.
		done := make(chan error)
		go func() {
			_, err := io.ReadAll(resp.Body)
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		resp.Body.Close()
		<-done
		time.Sleep(time.Minute)
		if bh.Active() != 0 || br.State() != breaker.Closed || br.Counts().TotalFailures != 0 {
			t.Fatalf("Active %d, breaker %v %+v", bh.Active(), br.State(), br.Counts())
		}
	})
}

func TestWithStreamTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A completion that is not streamed: its headers and body come
		// after 30 s.
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			time.Sleep(30 * time.Second)
			resp, b := fedResponse(req, 200, "application/json", false, step{0, `{"answer":1}`})
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: 5 * time.Second, IdleTimeout: time.Second,
			Policy: newPipeline(t, compose.Policies{})}
		_, err := get(t, tr, context.Background())
		isStreamTimeout(t, err, httppolicy.ErrFirstByteTimeout)

		for _, ctx := range []context.Context{
			httppolicy.WithStreamTimeouts(context.Background(), 0, 0),
			httppolicy.WithStreamTimeouts(context.Background(), time.Minute, time.Second),
		} {
			resp, err := get(t, tr, ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp.Body); got != `{"answer":1}` {
				t.Fatalf("body %q", got)
			}
			resp.Body.Close()
		}

		// And the other way: a Transport without timeouts, a request with.
		tr = &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{})}
		_, err = get(t, tr, httppolicy.WithStreamTimeouts(context.Background(), time.Second, 0))
		isStreamTimeout(t, err, httppolicy.ErrFirstByteTimeout)
	})
}

func TestStreamTimeoutsInvalid(t *testing.T) {
	base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
		t.Error("request sent")
		return nil, nil, errors.New("sent")
	}}
	tests := []struct {
		name  string
		tr    *httppolicy.Transport
		ctx   context.Context
		field string
	}{
		{"FirstByteTimeout", &httppolicy.Transport{Base: base, FirstByteTimeout: -1}, context.Background(), "Transport.FirstByteTimeout"},
		{"IdleTimeout", &httppolicy.Transport{Base: base, IdleTimeout: -time.Second}, context.Background(), "Transport.IdleTimeout"},
		{"WithStreamTimeouts", &httppolicy.Transport{Base: base, IdleTimeout: time.Second},
			httppolicy.WithStreamTimeouts(context.Background(), -1, 0), "WithStreamTimeouts: firstByte"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.tr.Policy = newPipeline(t, compose.Policies{})
			body := newTrackBody("{}")
			req, _ := http.NewRequestWithContext(tt.ctx, "POST", "http://dep.test/", body)
			_, err := tt.tr.RoundTrip(req)
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("err = %v, want one naming %s", err, tt.field)
			}
			if !body.closed.Load() {
				t.Fatal("request body not closed")
			}
		})
	}
}

func TestTooManyKeepalives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ping := strings.Repeat(": ping\n", 1<<10)
		var steps []step
		for range (1 << 20) / len(ping) * 2 {
			steps = append(steps, step{0, ping})
		}
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "text/event-stream", true, steps...)
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: time.Minute, Policy: newPipeline(t, compose.Policies{})}
		_, err := get(t, tr, context.Background())
		if err == nil || !strings.Contains(err.Error(), "keepalives") {
			t.Fatalf("err = %v", err)
		}
		if !base.allClosed() {
			t.Fatal("body left open")
		}
	})
}

func TestCallerCancelWhileWaitingForFirstByte(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "text/event-stream", true, step{0, commentPing})
			return resp, b, nil
		}}
		bh := newBulkhead(t, 1, 0)
		br := newBreaker(t, 1)
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: time.Minute,
			Policy: newPipeline(t, compose.Policies{Bulkhead: bh, Retry: newRetry(t, 3, nil), Breaker: br})}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		_, err := get(t, tr, ctx)
		if !errors.Is(err, context.Canceled) || errors.Is(err, httppolicy.ErrFirstByteTimeout) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if el := time.Since(start); el != time.Second {
			t.Fatalf("RoundTrip returned %v after the start, want 1s (at the cancellation)", el)
		}
		synctest.Wait()
		if base.count() != 1 || !base.allClosed() || bh.Active() != 0 || br.Counts().TotalFailures != 0 {
			t.Fatalf("attempts %d, closed %v, Active %d, breaker %+v", base.count(), base.allClosed(), bh.Active(), br.Counts())
		}
	})
}

package httppolicy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/internal/telemetry"
)

// Over real loopback connections (no synctest bubble): short timeouts,
// generous bounds.

func TestFirstByteTimeoutOverNetwork(t *testing.T) {
	var hits atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if hits.Add(1) == 1 {
			// Headers, keepalives, then nothing: a replica that is stuck.
			io.WriteString(w, commentPing)
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
			return
		}
		io.WriteString(w, openaiChunk)
		io.WriteString(w, "data: [DONE]\n\n")
	})
	br := newBreaker(t, 5)
	tr := &httppolicy.Transport{Base: newBase(t, 2), FirstByteTimeout: 300 * time.Millisecond, IdleTimeout: time.Second,
		Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil), Breaker: br})}
	start := time.Now()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp.Body)
	resp.Body.Close()
	if want := openaiChunk + "data: [DONE]\n\n"; body != want {
		t.Fatalf("body %q, want %q", body, want)
	}
	if el := time.Since(start); el < 300*time.Millisecond || el > 10*time.Second {
		t.Fatalf("took %v", el)
	}
	// The stuck replica's attempt failed, and was counted; on a loaded
	// machine a healthy attempt may be late too, hence hits >= 2.
	if n := hits.Load(); n < 2 || br.Counts().TotalFailures != uint32(n-1) {
		t.Fatalf("hits %d, breaker %+v; want a failure for each attempt but the last", n, br.Counts())
	}
}

func TestIdleTimeoutOverNetwork(t *testing.T) {
	tests := []struct {
		name, ct, first, keepalive string
	}{
		{"comment keepalives", "text/event-stream", openaiChunk, commentPing},
		{"anthropic pings", "text/event-stream", anthropicText, anthropicPing},
		{"plain body stalls mid-way", "application/json", `{"half":`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.ct)
				io.WriteString(w, tt.first)
				http.NewResponseController(w).Flush()
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-tick.C:
						if tt.keepalive != "" {
							io.WriteString(w, tt.keepalive)
							http.NewResponseController(w).Flush()
						}
					case <-r.Context().Done():
						return
					}
				}
			})
			bh := newBulkhead(t, 1, 0)
			br := newBreaker(t, 5)
			tr := &httppolicy.Transport{Base: newBase(t, 1), IdleTimeout: 300 * time.Millisecond,
				Policy: newPipeline(t, compose.Policies{Bulkhead: bh, Retry: newRetry(t, 3, nil), Breaker: br})}
			req, _ := http.NewRequest("GET", srv.URL, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			start := time.Now()
			got, err := io.ReadAll(resp.Body)
			isStreamTimeout(t, err, httppolicy.ErrIdleTimeout)
			if el := time.Since(start); el < 300*time.Millisecond || el > 10*time.Second {
				t.Fatalf("stall detected after %v", el)
			}
			if !strings.HasPrefix(string(got), tt.first) {
				t.Fatalf("read %q", got)
			}
			if bh.Active() != 0 || br.Counts().TotalFailures != 1 {
				t.Fatalf("Active %d, breaker %+v", bh.Active(), br.Counts())
			}
		})
	}
}

// TestStreamTimeoutTelemetry checks the watertight.timeouts counts and the
// span events of both timeouts.
func TestStreamTimeoutTelemetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		defer tp.Shutdown(context.Background())

		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			if n%2 == 1 {
				resp, b := fedResponse(req, 200, "", true)
				return resp, b, nil
			}
			resp, b := fedResponse(req, 200, "", true, step{0, "x"})
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, Name: "llm", MeterProvider: mp,
			FirstByteTimeout: time.Second, IdleTimeout: time.Second, Policy: newPipeline(t, compose.Policies{})}
		ctx, span := tp.Tracer("test").Start(context.Background(), "call")
		get(t, tr, ctx) // first byte timeout
		resp, err := get(t, tr, ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body) // idle timeout
		resp.Body.Close()
		if want := `httppolicy "llm": no data for 1s: httppolicy: stream idle timeout exceeded`; err == nil || err.Error() != want {
			t.Fatalf("err = %v, want %s", err, want)
		}
		span.End()

		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		counts := map[attribute.Set]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != telemetry.MetricTimeouts {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					counts[dp.Attributes] = dp.Value
				}
			}
		}
		for _, kind := range []string{"first_byte", "idle"} {
			set := attribute.NewSet(telemetry.KeyKind.String(kind), telemetry.KeyName.String("llm"))
			if counts[set] != 1 {
				t.Errorf("watertight.timeouts{%s} = %d, want 1 (all: %v)", kind, counts[set], counts)
			}
		}
		var kinds []string
		for _, s := range sr.Ended() {
			for _, ev := range s.Events() {
				if ev.Name != telemetry.EventTimeout {
					continue
				}
				for _, a := range ev.Attributes {
					if a.Key == telemetry.KeyKind {
						kinds = append(kinds, a.Value.AsString())
					}
				}
			}
		}
		if fmt.Sprint(kinds) != "[first_byte idle]" {
			t.Errorf("span timeout events %v, want [first_byte idle]", kinds)
		}
	})
}

// TestStreamTimeoutStorm runs many exchanges at once with both timeouts
// and every way a stream can go: on time, a late first byte, stalls with
// keepalives, a reader closing early or canceling at random moments, a
// base that panics. Every slot is freed, every body closed or aborted,
// and every error is one of those expected.
func TestStreamTimeoutStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		var rngMu sync.Mutex
		intn := func(n int) int {
			rngMu.Lock()
			defer rngMu.Unlock()
			return rng.IntN(n)
		}
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			switch intn(6) {
			case 0: // late first byte behind keepalives
				resp, b := fedResponse(req, 200, "text/event-stream", true, step{0, commentPing}, step{time.Second, anthropicPing})
				return resp, b, nil
			case 1: // stalls after a few events
				resp, b := fedResponse(req, 200, "text/event-stream", true, step{0, openaiChunk},
					step{300 * time.Millisecond, openaiChunk}, step{300 * time.Millisecond, commentPing})
				return resp, b, nil
			case 2:
				panic("base exploded")
			case 3:
				_, err := waitHeaders(req)
				return nil, nil, err
			default: // a healthy stream
				var steps []step
				for range 5 {
					steps = append(steps, step{time.Duration(intn(400)) * time.Millisecond, anthropicText})
				}
				resp, b := fedResponse(req, 200, "text/event-stream", false, steps...)
				return resp, b, nil
			}
		}}
		bh := newBulkhead(t, 8, 1000)
		br, _ := breaker.New(breaker.Config{Name: "dep", ConsecutiveFailures: 1 << 30})
		defer br.Close()
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: 700 * time.Millisecond, IdleTimeout: 500 * time.Millisecond,
			Policy: newPipeline(t, compose.Policies{Bulkhead: bh, Retry: newRetry(t, 2, nil), Breaker: br})}

		var wg sync.WaitGroup
		var ok, failed, panicked atomic.Int32
		for range 300 {
			wg.Go(func() {
				defer func() {
					if recover() != nil {
						panicked.Add(1)
					}
				}()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if intn(4) == 0 {
					d := time.Duration(intn(3000)) * time.Millisecond
					time.AfterFunc(d, cancel)
				}
				resp, err := get(t, tr, ctx)
				if err != nil {
					checkStormErr(t, err)
					failed.Add(1)
					return
				}
				defer resp.Body.Close()
				if intn(5) == 0 {
					buf := make([]byte, intn(200)+1)
					resp.Body.Read(buf)
					return // closed early
				}
				if _, err := io.ReadAll(resp.Body); err != nil {
					checkStormErr(t, err)
					failed.Add(1)
					return
				}
				ok.Add(1)
			})
		}
		wg.Wait()
		time.Sleep(time.Minute)
		if bh.Active() != 0 || bh.Queued() != 0 {
			t.Fatalf("Active %d, Queued %d after the storm", bh.Active(), bh.Queued())
		}
		if !base.allClosed() {
			// A body not closed must at least have had its exchange aborted.
			base.mu.Lock()
			for _, b := range base.bodies {
				if !b.isClose.Load() && b.ctx.Err() == nil {
					t.Error("a body was neither closed nor aborted")
				}
			}
			base.mu.Unlock()
		}
		if ok.Load() == 0 || failed.Load() == 0 || panicked.Load() == 0 {
			t.Fatalf("ok %d, failed %d, panicked %d: the storm missed a case", ok.Load(), failed.Load(), panicked.Load())
		}
		t.Logf("ok %d, failed %d, panicked %d, attempts %d, breaker %+v", ok.Load(), failed.Load(), panicked.Load(), base.count(), br.Counts())
	})
}

func checkStormErr(t *testing.T, err error) {
	t.Helper()
	switch {
	case errors.Is(err, httppolicy.ErrFirstByteTimeout), errors.Is(err, httppolicy.ErrIdleTimeout),
		errors.Is(err, context.Canceled):
	default:
		t.Errorf("unexpected error %v", err)
	}
}

// TestStreamTimeoutsLeaveSwitchedConnection checks that neither timeout
// watches a 101 Switching Protocols connection, whose first byte may be
// the caller's to send: the server here speaks only once the caller has,
// later than both timeouts.
func TestStreamTimeoutsLeaveSwitchedConnection(t *testing.T) {
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
			conn.Write(buf)
		}
	})
	bh := newBulkhead(t, 1, 0)
	tr := &httppolicy.Transport{Base: newBase(t, 1), FirstByteTimeout: 20 * time.Millisecond, IdleTimeout: 20 * time.Millisecond,
		Policy: newPipeline(t, compose.Policies{Bulkhead: bh})}
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
	time.Sleep(100 * time.Millisecond)
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(rw) // waits longer than IdleTimeout for the echo
		done <- string(b)
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := rw.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got != "ping" {
		t.Fatalf("echo %q", got)
	}
	if bh.Active() != 0 {
		t.Fatal("slot held after the switched connection ended")
	}
}

// TestStreamTimeoutsKeepConnectionsAlive checks that ending each attempt's
// own context once its body is read does not cost the connection: a
// keep-alive connection serves every request, whole bodies and streams
// alike.
func TestStreamTimeoutsKeepConnectionsAlive(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, commentPing)
			http.NewResponseController(w).Flush()
			io.WriteString(w, openaiChunk)
			http.NewResponseController(w).Flush()
			io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		io.WriteString(w, "hello")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &httppolicy.Transport{Base: newBase(t, 1), FirstByteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
		Policy: newPipeline(t, compose.Policies{Attempt: newDeadline(t, time.Minute)})}
	for i := range 20 {
		path := "/"
		if i%2 == 1 {
			path = "/stream"
		}
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp.Body)
		resp.Body.Close()
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 20 sequential requests, want 1", n)
	}
}

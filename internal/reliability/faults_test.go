package reliability

import (
	"context"
	"errors"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// spanExporter is a trace exporter that is down: it blocks until release is
// closed (ignoring its ctx, as a wedged network write would), or fails.
type spanExporter struct {
	block   bool
	release chan struct{}
	calls   atomic.Int64
}

var errExporterDown = errors.New("exporter: connection refused")

func (e *spanExporter) ExportSpans(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
	e.calls.Add(1)
	if e.block {
		<-e.release
	}
	return errExporterDown
}

func (e *spanExporter) Shutdown(context.Context) error { return nil }

// silenceOtel routes otel.Handle errors to a counter for the test.
func silenceOtel(t *testing.T) *atomic.Int64 {
	var n atomic.Int64
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) { n.Add(1) }))
	t.Cleanup(func() { otel.SetErrorHandler(prev) })
	return &n
}

// tracedPipeline returns a bulkhead and retry pipeline traced by tp (nil:
// the global provider) and metered by mp (nil: the global provider).
func tracedPipeline(t *testing.T, tp trace.TracerProvider, mp metric.MeterProvider) (*compose.Pipeline, *bulkhead.Bulkhead) {
	t.Helper()
	bh, err := bulkhead.New(bulkhead.Config{Name: "exp", Limit: 4, MaxQueue: bulkhead.Unbounded, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bh.Close() })
	rt, err := retry.New(retry.Config{MaxAttempts: 2, InitialInterval: time.Microsecond, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	p, err := compose.New("exp", compose.Policies{Bulkhead: bh, Retry: rt},
		compose.WithTracerProvider(tp), compose.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	return p, bh
}

// runCalls makes n calls through p from 4 goroutines, every other one
// failing once (so it has two attempt spans), and fails the test if they
// have not all returned within limit.
func runCalls(t *testing.T, p *compose.Pipeline, n int, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan struct{})
	var bad atomic.Int64
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := g; i < n; i += 4 {
					failed := false
					err := p.Execute(context.Background(), func(context.Context) error {
						if i%2 == 0 && !failed {
							failed = true
							return errSoak
						}
						return nil
					})
					if err != nil {
						bad.Add(1)
					}
				}
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%d calls not done after %v: the exporter blocks the callers", n, limit)
	}
	if bad.Load() != 0 {
		t.Fatalf("%d calls failed: a telemetry failure reached the caller", bad.Load())
	}
	return time.Since(start)
}

// TestTraceExporterDownBatch: behind a BatchSpanProcessor, an exporter that
// blocks forever or fails never blocks or fails a call. The processor's
// queue (2048 spans) fills while the exporter is stuck, and the SDK drops
// further spans rather than wait; errors go to otel.Handle.
func TestTraceExporterDownBatch(t *testing.T) {
	for _, block := range []bool{true, false} {
		name := "fails"
		if block {
			name = "blocks"
		}
		t.Run(name, func(t *testing.T) {
			silenceOtel(t)
			exp := &spanExporter{block: block, release: make(chan struct{})}
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp,
				sdktrace.WithBatchTimeout(time.Millisecond), sdktrace.WithMaxQueueSize(64), sdktrace.WithMaxExportBatchSize(16)))
			p, bh := tracedPipeline(t, tp, nil)
			// 20 000 calls make 30 000 spans: hundreds of queues' worth.
			d := runCalls(t, p, 20_000, 20*time.Second)
			t.Logf("20000 calls in %v with the exporter %s (%d exports)", d, name, exp.calls.Load())
			if exp.calls.Load() == 0 {
				t.Fatal("the exporter was never called: the test tests nothing")
			}
			if bh.Active() != 0 {
				t.Fatalf("Active = %d", bh.Active())
			}
			close(exp.release)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			tp.Shutdown(ctx)
		})
	}
}

// TestTraceExporterDownSimple documents the trap: a SimpleSpanProcessor
// exports synchronously in span.End, on the caller's goroutine, so an
// exporter that blocks blocks every call through the pipeline (Execute ends
// the call's span before it returns). Use the BatchSpanProcessor
// (sdktrace.WithBatcher) in production. A failing exporter, by contrast,
// only costs the caller the failed export: the call still succeeds.
func TestTraceExporterDownSimple(t *testing.T) {
	silenceOtel(t)
	t.Run("blocks the caller", func(t *testing.T) {
		exp := &spanExporter{block: true, release: make(chan struct{})}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		p, _ := tracedPipeline(t, tp, nil)
		done := make(chan error, 1)
		go func() { done <- p.Execute(context.Background(), func(context.Context) error { return nil }) }()
		select {
		case err := <-done:
			t.Fatalf("Execute returned %v while the synchronous exporter was blocked", err)
		case <-time.After(50 * time.Millisecond):
		}
		close(exp.release) // the export returns (with an error): so does the call
		if err := <-done; err != nil {
			t.Fatalf("Execute = %v", err)
		}
		tp.Shutdown(context.Background())
	})
	t.Run("fails", func(t *testing.T) {
		exp := &spanExporter{}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		p, _ := tracedPipeline(t, tp, nil)
		runCalls(t, p, 1000, 20*time.Second)
		if exp.calls.Load() == 0 {
			t.Fatal("the exporter was never called")
		}
		tp.Shutdown(context.Background())
	})
}

// metricExporter fails every export.
type metricExporter struct{ calls atomic.Int64 }

func (e *metricExporter) Temporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	return sdkmetric.DefaultTemporalitySelector(k)
}

func (e *metricExporter) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return sdkmetric.DefaultAggregationSelector(k)
}

func (e *metricExporter) Export(context.Context, *metricdata.ResourceMetrics) error {
	e.calls.Add(1)
	return errExporterDown
}

func (e *metricExporter) ForceFlush(context.Context) error { return nil }
func (e *metricExporter) Shutdown(context.Context) error   { return nil }

// TestMetricExporterFails: a metric exporter that fails every export (every
// millisecond here) never fails or slows a call; the errors go to
// otel.Handle.
func TestMetricExporterFails(t *testing.T) {
	handled := silenceOtel(t)
	exp := &metricExporter{}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(time.Millisecond))))
	p, _ := tracedPipeline(t, nil, mp)
	for exp.calls.Load() < 3 {
		runCalls(t, p, 2000, 20*time.Second)
	}
	mp.Shutdown(context.Background())
	if handled.Load() == 0 {
		t.Fatal("the export errors were not reported to otel.Handle")
	}
}

// TestHungUpstream: an upstream that accepts the TCP connection and never
// answers is cut by the pipeline's deadline, and the call's bulkhead slot is
// freed, so the next call gets it.
func TestHungUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	accepted := make(chan struct{}, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accept and hold: never read, never answer
			mu.Unlock()
			accepted <- struct{}{}
		}
	}()
	bh, err := bulkhead.New(bulkhead.Config{Name: "upstream", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer bh.Close()
	dl, err := deadline.New(deadline.Config{Name: "upstream", Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p, err := compose.New("upstream", compose.Policies{Bulkhead: bh, Deadline: dl})
	if err != nil {
		t.Fatal(err)
	}
	base := &http.Transport{}
	client := &http.Client{Transport: roundTripper(func(req *http.Request) (*http.Response, error) {
		var resp *http.Response
		err := p.Execute(req.Context(), func(ctx context.Context) error {
			var err error
			resp, err = base.RoundTrip(req.WithContext(ctx))
			return err
		})
		return resp, err
	})}
	for i := range 3 {
		start := time.Now()
		resp, err := client.Get("http://" + ln.Addr().String() + "/")
		took := time.Since(start)
		if resp != nil {
			resp.Body.Close()
		}
		if !errors.Is(err, deadline.ErrExceeded) {
			t.Fatalf("call %d: err = %v; want deadline.ErrExceeded", i, err)
		}
		if took < 100*time.Millisecond || took > 5*time.Second {
			t.Fatalf("call %d took %v; want about the 100ms deadline", i, took)
		}
		if a := bh.Active(); a != 0 {
			t.Fatalf("call %d: Active = %d after the call; the slot was not freed", i, a)
		}
	}
	if len(accepted) == 0 {
		t.Fatal("the upstream never accepted a connection")
	}
	base.CloseIdleConnections()
	ln.Close()
	mu.Lock()
	for _, c := range held {
		c.Close()
	}
	mu.Unlock()
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestFnIgnoringCtx measures, in fake time, what a fn that ignores its ctx
// costs. Timeouts are cooperative (package deadline starts no goroutine and
// never abandons fn), so such a fn runs to its end: Execute returns only
// when fn returns, 1 s here for a 100 ms Deadline, and returns fn's own
// result (nil: "our timer fired, fn returned nil"; an error is wrapped in an
// *deadline.ExceededError). For all that time it holds its bulkhead slot
// (Active stays 1, a second caller waits the whole second) and, as a
// half-open probe, the breaker's only probe place (every other call is
// rejected "half_open_full" until it returns).
func TestFnIgnoringCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bh, _ := bulkhead.New(bulkhead.Config{Name: "slow", Limit: 1, MaxQueue: 1})
		defer bh.Close()
		dl, _ := deadline.New(deadline.Config{Name: "slow", Timeout: 100 * time.Millisecond})
		br, _ := breaker.New(breaker.Config{Name: "slow", ConsecutiveFailures: 1, OpenTimeout: time.Second})
		defer br.Close()
		p, err := compose.New("slow", compose.Policies{Bulkhead: bh, Deadline: dl, Breaker: br})
		if err != nil {
			t.Fatal(err)
		}
		ignoring := func(fail bool) policy.Func {
			return func(context.Context) error {
				time.Sleep(time.Second) // ignores ctx
				if fail {
					return errSoak
				}
				return nil
			}
		}

		// The slot: held for the whole second.
		start := time.Now()
		var firstErr, secondErr error
		var secondWaited time.Duration
		var wg sync.WaitGroup
		wg.Go(func() { firstErr = p.Execute(context.Background(), ignoring(false)) })
		synctest.Wait()
		time.Sleep(500 * time.Millisecond)
		if bh.Active() != 1 {
			t.Fatalf("Active = %d at 500ms; want the slot still held", bh.Active())
		}
		wg.Go(func() {
			s := time.Now()
			secondErr = p.Execute(context.Background(), func(context.Context) error { return nil })
			secondWaited = time.Since(s)
		})
		synctest.Wait()
		if bh.Queued() != 1 {
			t.Fatalf("Queued = %d; want the second caller waiting", bh.Queued())
		}
		wg.Wait()
		if took := time.Since(start); firstErr != nil || took != time.Second {
			t.Fatalf("Execute = %v after %v; want nil after the fn's full 1s", firstErr, took)
		}
		if secondErr != nil || secondWaited != 500*time.Millisecond {
			t.Fatalf("second call: %v after waiting %v; want nil after 500ms", secondErr, secondWaited)
		}

		// A failing fn that ignores ctx: the timeout is reported, late.
		start = time.Now()
		err = p.Execute(context.Background(), ignoring(true))
		if !errors.Is(err, deadline.ErrExceeded) || !errors.Is(err, errSoak) || time.Since(start) != time.Second {
			t.Fatalf("Execute = %v after %v; want ErrExceeded wrapping fn's error after 1s", err, time.Since(start))
		}

		// The breaker tripped on that failure. After OpenTimeout the next
		// call is the only probe: while it ignores its ctx, every other call
		// is rejected half_open_full, for the whole second.
		time.Sleep(time.Second)
		wg.Go(func() { firstErr = p.Execute(context.Background(), ignoring(false)) })
		synctest.Wait()
		bh2, _ := bulkhead.New(bulkhead.Config{Limit: 10})
		defer bh2.Close()
		p2, _ := compose.New("slow2", compose.Policies{Bulkhead: bh2, Breaker: br})
		rejected := 0
		for range 10 {
			time.Sleep(90 * time.Millisecond)
			var re *policy.RejectedError
			if err := p2.Execute(context.Background(), func(context.Context) error { return nil }); errors.As(err, &re) && re.Reason == breaker.ReasonHalfOpenFull {
				rejected++
			}
		}
		wg.Wait()
		if rejected != 10 || firstErr != nil || br.State() != breaker.Closed {
			t.Fatalf("%d of 10 calls rejected half_open_full while the probe ran; probe %v; state %v", rejected, firstErr, br.State())
		}
	})
}

// TestProbeAbortsThroughCompose: a half-open probe that calls
// runtime.Goexit (t.FailNow in a test) or panics, through a compose
// pipeline, counts as a failed probe: the breaker opens again instead of
// staying half-open forever (gobreaker's own trap), the bulkhead slot is
// freed, and after OpenTimeout a good probe closes it.
func TestProbeAbortsThroughCompose(t *testing.T) {
	for _, how := range []string{"goexit", "panic"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bh, _ := bulkhead.New(bulkhead.Config{Name: "probe", Limit: 2})
				defer bh.Close()
				br, _ := breaker.New(breaker.Config{Name: "probe", ConsecutiveFailures: 1, OpenTimeout: 10 * time.Millisecond})
				defer br.Close()
				rt, _ := retry.New(retry.Config{MaxAttempts: 2})
				dl, _ := deadline.New(deadline.Config{Timeout: time.Second})
				p, err := compose.New("probe", compose.Policies{Bulkhead: bh, Deadline: dl, Retry: rt, Breaker: br, Attempt: dl})
				if err != nil {
					t.Fatal(err)
				}
				ok := func(context.Context) error { return nil }
				p.Execute(context.Background(), func(context.Context) error { return policy.Permanent(errSoak) })
				if br.State() != breaker.Open {
					t.Fatalf("state %v; want open", br.State())
				}
				time.Sleep(10 * time.Millisecond)
				if br.State() != breaker.HalfOpen {
					t.Fatalf("state %v; want half-open", br.State())
				}
				done := make(chan any)
				go func() {
					defer func() { done <- recover() }()
					p.Execute(context.Background(), func(context.Context) error {
						if how == "panic" {
							panic("probe panicked")
						}
						runtime.Goexit()
						return nil
					})
				}()
				if v := <-done; (v != nil) != (how == "panic") {
					t.Fatalf("recovered %v", v)
				}
				if br.State() != breaker.Open {
					t.Fatalf("state %v after the probe's %s; want open again", br.State(), how)
				}
				if bh.Active() != 0 {
					t.Fatalf("Active = %d; the slot was not freed", bh.Active())
				}
				time.Sleep(10 * time.Millisecond)
				if err := p.Execute(context.Background(), ok); err != nil || br.State() != breaker.Closed {
					t.Fatalf("good probe: %v, state %v; want nil, closed", err, br.State())
				}
			})
		})
	}
}

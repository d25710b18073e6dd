package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
)

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// pipeline builds Retry -> RateLimit -> Breaker; lim may be nil.
func pipeline(t *testing.T, lim *ratelimit.Limiter, maxInterval time.Duration) (*compose.Pipeline, *breaker.Breaker) {
	t.Helper()
	rt := must[*retry.Retry](t)(retry.New(retry.Config{MaxAttempts: 5, InitialInterval: 100 * time.Millisecond,
		MaxInterval: maxInterval, Jitter: -1}))
	br := must[*breaker.Breaker](t)(breaker.New(breaker.Config{ConsecutiveFailures: 1}))
	t.Cleanup(func() { br.Close() })
	pols := compose.Policies{Retry: rt, Breaker: br}
	if lim != nil {
		pols.RateLimit = lim
	}
	return must[*compose.Pipeline](t)(compose.New("llm", pols)), br
}

// throttledThen returns an fn whose first n attempts fail with a 429 asking
// for ra, and the rest succeed; it records when each attempt started.
func throttledThen(n int, ra time.Duration, starts *[]time.Duration, t0 time.Time) policy.Func {
	return func(ctx context.Context) error {
		*starts = append(*starts, time.Since(t0))
		if len(*starts) <= n {
			return &httppolicy.StatusError{StatusCode: 429, RetryAfterDelay: ra}
		}
		return nil
	}
}

// No double wait: the retry leaves a 429's Retry-After to the hold, so the
// next attempt starts when the hold ends, not after the hold plus a wait.
// And 429s do not open a breaker that trips on the first failure.
func TestPipelineNoDoubleWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, ratelimit.Config{})
		p, br := pipeline(t, lim, 10*time.Second)
		var starts []time.Duration
		if err := p.Execute(context.Background(), throttledThen(2, 2*time.Second, &starts, time.Now())); err != nil {
			t.Fatal(err)
		}
		want := []time.Duration{0, 2 * time.Second, 4 * time.Second}
		if len(starts) != 3 || starts[1] != want[1] || starts[2] != want[2] {
			t.Errorf("attempts started at %v, want %v", starts, want)
		}
		if br.State() != breaker.Closed {
			t.Errorf("breaker %v after 429s", br.State())
		}
		// A concurrent call arriving during a hold waits for it too: the
		// hold is shared.
		observe(lim, resp(429, "Retry-After", "1"))
		start := time.Now()
		if err := p.Execute(context.Background(), ok); err != nil || time.Since(start) != time.Second {
			t.Errorf("second call: %v after %v", err, time.Since(start))
		}
	})
}

// A Retry-After longer than the retry's MaxInterval: without a limiter the
// retry gives up with ReasonRetryAfter; with one whose MaxWait is that
// MaxInterval, the next attempt is rejected (reason throttled) and the call
// ends as ExhaustedError with Reason rejected, which is not a rejection.
func TestPipelineHoldPastMaxInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := pipeline(t, nil, 10*time.Second)
		var starts []time.Duration
		err := p.Execute(context.Background(), throttledThen(1, 30*time.Second, &starts, time.Now()))
		if ex, isEx := errors.AsType[*retry.ExhaustedError](err); !isEx || ex.Reason != retry.ReasonRetryAfter {
			t.Fatalf("without a limiter: %v", err)
		}

		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		lim := newLimiter(t, ratelimit.Config{Name: "llm", MaxWait: 10 * time.Second, MeterProvider: mp})
		p, br := pipeline(t, lim, 10*time.Second)
		starts = nil
		t0 := time.Now()
		err = p.Execute(context.Background(), throttledThen(1, 30*time.Second, &starts, t0))
		ex, isEx := errors.AsType[*retry.ExhaustedError](err)
		if !isEx || ex.Reason != retry.ReasonRejected || ex.Attempts != 1 || ex.Rejection == nil ||
			ex.Rejection.Kind != "ratelimit" || ex.Rejection.Reason != ratelimit.ReasonThrottled {
			t.Fatalf("with a limiter: %v (%+v)", err, ex)
		}
		if errors.Is(err, policy.ErrRejected) || !errors.Is(err, policy.ErrThrottled) {
			t.Errorf("err %v: fn ran, so no rejection; the 429 is in the chain", err)
		}
		if len(starts) != 1 || time.Since(t0) != 100*time.Millisecond {
			t.Errorf("%d attempts, ended after %v (the retry's own 100ms wait, then the rejection)", len(starts), time.Since(t0))
		}
		if br.State() != breaker.Closed {
			t.Errorf("breaker %v", br.State())
		}
		// A new call during the hold is rejected at once: fn never ran.
		err = p.Execute(context.Background(), ok)
		checkRejection(t, err, ratelimit.ReasonThrottled)
		if n := rejections(t, reader, "llm", ratelimit.ReasonThrottled); n != 2 {
			t.Errorf("watertight.rejections{throttled} = %d, want 2", n)
		}
	})
}

// A 503 stays a breaker failure.
func TestPipeline503StillOpensTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, ratelimit.Config{})
		p, br := pipeline(t, lim, 10*time.Second)
		err := p.Execute(context.Background(), func(context.Context) error {
			return &httppolicy.StatusError{StatusCode: 503}
		})
		if br.State() != breaker.Open || !errors.Is(err, retry.ErrExhausted) {
			t.Errorf("breaker %v, err %v", br.State(), err)
		}
	})
}

func rejections(t *testing.T, r *sdkmetric.ManualReader, name, reason string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want := attribute.NewSet(
		attribute.String("watertight.policy.kind", "ratelimit"),
		attribute.String("watertight.policy.name", name),
		attribute.String("watertight.rejection.reason", reason))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "watertight.rejections" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if dp.Attributes.Equals(&want) {
					return dp.Value
				}
			}
		}
	}
	return 0
}

// A held attempt waits before the breaker: while it waits, the half-open
// breaker's one probe stays free for a call that is not held.
func TestHeldAttemptTakesNoProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		br := must[*breaker.Breaker](t)(breaker.New(breaker.Config{ConsecutiveFailures: 1, OpenTimeout: time.Second}))
		defer br.Close()
		lim := newLimiter(t, ratelimit.Config{})
		held := must[*compose.Pipeline](t)(compose.New("held", compose.Policies{RateLimit: lim, Breaker: br}))
		free := must[*compose.Pipeline](t)(compose.New("free", compose.Policies{Breaker: br}))
		free.Execute(context.Background(), func(context.Context) error { return errors.New("down") })
		time.Sleep(time.Second)
		if br.State() != breaker.HalfOpen {
			t.Fatalf("breaker %v", br.State())
		}
		lim.HoldFor(5 * time.Second)
		done := make(chan error)
		go func() { done <- held.Execute(context.Background(), ok) }()
		synctest.Wait() // the held call waits in the limiter
		if err := free.Execute(context.Background(), ok); err != nil {
			t.Errorf("the probe was taken by a held attempt: %v", err)
		}
		if err := <-done; err != nil || br.State() != breaker.Closed {
			t.Errorf("held call: %v, breaker %v", err, br.State())
		}
	})
}

package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/failsafe-go/failsafe-go"
	fsbulkhead "github.com/failsafe-go/failsafe-go/bulkhead"
	fsbreaker "github.com/failsafe-go/failsafe-go/circuitbreaker"
	fsretry "github.com/failsafe-go/failsafe-go/retrypolicy"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/retry"
)

// The settings both libraries get, so that like is compared with like.
const (
	bigLimit        = 10000 // bulkhead limit above any goroutine count used
	callTimeout     = time.Minute
	maxAttempts     = 3
	breakerFailures = 5
	breakerOpen     = 30 * time.Second
)

var (
	bg      = context.Background()
	errBoom = errors.New("boom")
)

// The work: top-level funcs, so that passing them allocates nothing in
// either library. Both see a ctx: watertight's argument, failsafe's
// Execution.Context().
func work(context.Context) error { return nil }

func fail(context.Context) error { return errBoom }

func fsWork(e failsafe.Execution[any]) error { return work(e.Context()) }

func fsFail(e failsafe.Execution[any]) error { return fail(e.Context()) }

// fsExec builds a failsafe executor once, bound to bg, as a caller reusing
// one executor would. A per-request ctx would cost one more allocation per
// call (Executor.WithContext copies the executor).
func fsExec(ps ...failsafe.Policy[any]) failsafe.Executor[any] {
	return failsafe.With[any](ps...).WithContext(bg)
}

// must returns v, or fails tb if err is not nil: must(tb)(f()).
func must[T any](tb testing.TB) func(v T, err error) T {
	return func(v T, err error) T {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
		return v
	}
}

// providers are the telemetry providers a watertight setup uses; both nil
// means the global (default no-op) ones.
type providers struct {
	mp metric.MeterProvider
	tp trace.TracerProvider
}

// Watertight setups.

func wtBulkhead(tb testing.TB, limit, maxQueue int, maxWait time.Duration, mp metric.MeterProvider) *bulkhead.Bulkhead {
	b := must[*bulkhead.Bulkhead](tb)(bulkhead.New(bulkhead.Config{Name: "b", Limit: limit, MaxQueue: maxQueue, MaxWait: maxWait, MeterProvider: mp}))
	tb.Cleanup(func() { b.Close() })
	return b
}

func wtDeadline(tb testing.TB, mp metric.MeterProvider) *deadline.Deadline {
	return must[*deadline.Deadline](tb)(deadline.New(deadline.Config{Name: "d", Timeout: callTimeout, MeterProvider: mp}))
}

func wtRetry(tb testing.TB, mp metric.MeterProvider) *retry.Retry {
	return must[*retry.Retry](tb)(retry.New(retry.Config{
		Name:          "r",
		MaxAttempts:   maxAttempts,
		NewSchedule:   func() backoff.BackOff { return &backoff.ZeroBackOff{} },
		MeterProvider: mp,
	}))
}

// noWait is a retry schedule of zero waits that never stops.
func noWait() (time.Duration, bool) { return 0, true }

func wtBreaker(tb testing.TB, mp metric.MeterProvider) *breaker.Breaker {
	b := must[*breaker.Breaker](tb)(breaker.New(breaker.Config{
		Name:                "c",
		ConsecutiveFailures: breakerFailures,
		OpenTimeout:         breakerOpen,
		HalfOpenRequests:    1,
		MeterProvider:       mp,
	}))
	tb.Cleanup(func() { b.Close() })
	return b
}

// wtComposed is bulkhead + deadline 1m + retry 3 + breaker.
func wtComposed(tb testing.TB, p providers) *compose.Pipeline {
	return must[*compose.Pipeline](tb)(compose.New("p", compose.Policies{
		Bulkhead: wtBulkhead(tb, bigLimit, 0, 0, p.mp),
		Deadline: wtDeadline(tb, p.mp),
		Retry:    wtRetry(tb, p.mp),
		Breaker:  wtBreaker(tb, p.mp),
	}, compose.WithTracerProvider(p.tp), compose.WithMeterProvider(p.mp)))
}

// failsafe-go setups, with the same settings.

func fsBulkhead(limit uint, maxWait time.Duration) fsbulkhead.Bulkhead[any] {
	return fsbulkhead.NewBuilder[any](limit).WithMaxWaitTime(maxWait).Build()
}

func fsTimeout() fstimeout.Timeout[any] { return fstimeout.New[any](callTimeout) }

func fsRetry() fsretry.RetryPolicy[any] {
	return fsretry.NewBuilder[any]().WithMaxAttempts(maxAttempts).WithDelay(0).Build()
}

func fsBreaker() fsbreaker.CircuitBreaker[any] {
	return fsbreaker.NewBuilder[any]().
		WithFailureThreshold(breakerFailures).
		WithDelay(breakerOpen).
		WithSuccessThreshold(1).
		Build()
}

// fsComposed is failsafe.With(bulkhead, timeout 1m, retry 3, breaker), the
// same order as watertight's pipeline: bulkhead outermost, breaker inside
// the retry loop.
func fsComposed() failsafe.Executor[any] {
	return fsExec(fsBulkhead(bigLimit, 0), fsTimeout(), fsRetry(), fsBreaker())
}

// SDK telemetry: a metric provider with a ManualReader (never collected
// during the run) and a tracer provider sampling everything, exporting
// synchronously to an exporter that discards.

type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

func sdkProviders(tb testing.TB) (*sdkmetric.MeterProvider, *sdktrace.TracerProvider) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(discardExporter{})),
	)
	tb.Cleanup(func() {
		_ = tp.Shutdown(bg)
		_ = mp.Shutdown(bg)
	})
	return mp, tp
}

// holdSlot starts a goroutine that runs run with a fn that blocks, waits
// until fn is running (so the slot is held), and returns; the goroutine is
// released and waited for at cleanup.
func holdSlot(tb testing.TB, run func(fn func(context.Context) error)) {
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		run(func(context.Context) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	tb.Cleanup(func() {
		close(release)
		<-done
	})
}

// fsFunc adapts fn to failsafe's Execution-taking func. It allocates (a
// closure): use it only outside measured loops.
func fsFunc(fn func(context.Context) error) func(failsafe.Execution[any]) error {
	return func(e failsafe.Execution[any]) error { return fn(e.Context()) }
}

package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/fallback"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
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

var errBad = errors.New("400 bad request")

// answer returns an fn that counts its calls and returns v, err.
func answer(calls *atomic.Int32, v string, err error) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		calls.Add(1)
		return v, err
	}
}

func TestFirstSuccessWins(t *testing.T) {
	var a, b atomic.Int32
	got, err := fallback.Do(context.Background(), fallback.Config{}, []fallback.Alternative[string]{
		{Name: "openai", Fn: answer(&a, "from openai", nil)},
		{Name: "anthropic", Fn: answer(&b, "from anthropic", nil)},
	})
	if err != nil || got != "from openai" || a.Load() != 1 || b.Load() != 0 {
		t.Errorf("Do = %q, %v; calls %d, %d", got, err, a.Load(), b.Load())
	}
}

// Each default reason to move on: a rejection, our timeout, an exhausted
// retry, a 429.
func TestDefaultFallsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		br := must[*breaker.Breaker](t)(breaker.New(breaker.Config{}))
		defer br.Close()
		br.ForceOpen()
		dl := must[*deadline.Deadline](t)(deadline.New(deadline.Config{Timeout: time.Second}))
		rt := must[*retry.Retry](t)(retry.New(retry.Config{MaxAttempts: 2, InitialInterval: time.Millisecond}))
		slow := func(ctx context.Context) (string, error) { <-ctx.Done(); return "", ctx.Err() }
		for _, tt := range []struct {
			name   string
			alt    fallback.Alternative[string]
			reason string
		}{
			{"rejection", fallback.Alternative[string]{Name: "p", Policy: br, Fn: answer(new(atomic.Int32), "x", nil)}, "rejected"},
			{"timeout", fallback.Alternative[string]{Name: "p", Policy: dl, Fn: slow}, "timeout"},
			{"exhausted", fallback.Alternative[string]{Name: "p", Policy: rt, Fn: answer(new(atomic.Int32), "", errors.New("boom"))}, "retry_exhausted"},
			{"throttled", fallback.Alternative[string]{Name: "p", Fn: answer(new(atomic.Int32), "", &httppolicy.StatusError{StatusCode: 429})}, "429"},
		} {
			var moved []string
			cfg := fallback.Config{OnFallback: func(_ context.Context, from, to string, err error) {
				moved = append(moved, from+">"+to)
			}}
			got, err := fallback.Do(context.Background(), cfg, []fallback.Alternative[string]{
				tt.alt, {Name: "s", Fn: answer(new(atomic.Int32), "second", nil)},
			})
			if err != nil || got != "second" || len(moved) != 1 || moved[0] != "p>s" {
				t.Errorf("%s: Do = %q, %v; moves %v", tt.name, got, err, moved)
			}
		}
	})
}

func TestNoFallbackOnOtherErrors(t *testing.T) {
	var b atomic.Int32
	_, err := fallback.Do(context.Background(), fallback.Config{Name: "chat"}, []fallback.Alternative[string]{
		{Name: "openai", Fn: answer(new(atomic.Int32), "", errBad)},
		{Name: "anthropic", Fn: answer(&b, "x", nil)},
	})
	fe, ok := errors.AsType[*fallback.Error](err)
	if !ok || fe.Stop != fallback.StopNoFallback || len(fe.Tried) != 1 || fe.Untried != 1 || b.Load() != 0 {
		t.Fatalf("err = %v (%+v), second ran %d", err, fe, b.Load())
	}
	if !errors.Is(err, errBad) || !errors.Is(err, fallback.ErrFailed) {
		t.Errorf("err %v does not match its cause and ErrFailed", err)
	}
	want := `fallback "chat": stopped on a failure that does not fall back, 1 untried: openai: 400 bad request`
	if err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
}

// A classifier of the user's own: here, an SDK error's status.
type sdkError struct{ status int }

func (e *sdkError) Error() string { return fmt.Sprintf("sdk: status %d", e.status) }

func TestShouldFallbackCustom(t *testing.T) {
	cfg := fallback.Config{ShouldFallback: func(err error) bool {
		se, ok := errors.AsType[*sdkError](err)
		return ok && (se.status == 408 || se.status == 429 || se.status >= 500)
	}}
	got, err := fallback.Do(context.Background(), cfg, []fallback.Alternative[int]{
		{Name: "a", Fn: func(context.Context) (int, error) { return 0, &sdkError{503} }},
		{Name: "b", Fn: func(context.Context) (int, error) { return 2, nil }},
	})
	if err != nil || got != 2 {
		t.Errorf("503: %d, %v", got, err)
	}
	_, err = fallback.Do(context.Background(), cfg, []fallback.Alternative[int]{
		{Name: "a", Fn: func(context.Context) (int, error) { return 0, &sdkError{404} }},
		{Name: "b", Fn: func(context.Context) (int, error) { t.Error("b ran after a 404"); return 2, nil }},
	})
	if fe, ok := errors.AsType[*fallback.Error](err); !ok || fe.Stop != fallback.StopNoFallback {
		t.Errorf("404: %v", err)
	}
}

func TestAllFail(t *testing.T) {
	e1 := &httppolicy.StatusError{StatusCode: 429}
	e2 := retry.ErrExhausted
	_, err := fallback.Do(context.Background(), fallback.Config{}, []fallback.Alternative[string]{
		{Name: "openai", Fn: answer(new(atomic.Int32), "", e1)},
		{Name: "anthropic", Fn: answer(new(atomic.Int32), "", e2)},
	})
	fe, ok := errors.AsType[*fallback.Error](err)
	if !ok || fe.Stop != fallback.StopExhausted || len(fe.Tried) != 2 || fe.Untried != 0 {
		t.Fatalf("err = %v", err)
	}
	if !errors.Is(err, e1) || !errors.Is(err, e2) || !errors.Is(err, policy.ErrThrottled) {
		t.Errorf("err %v does not wrap both failures", err)
	}
	want := "fallback: all 2 alternatives failed: openai: httppolicy: response status 429 Too Many Requests; anthropic: retry: exhausted"
	if err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
}

// The caller's cancellation, or its own deadline, never moves on.
func TestCallerContextEndsAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		_, err := fallback.Do(ctx, fallback.Config{ShouldFallback: func(error) bool { return true }}, []fallback.Alternative[string]{
			{Name: "a", Fn: func(ctx context.Context) (string, error) { cancel(); return "", ctx.Err() }},
			{Name: "b", Fn: func(context.Context) (string, error) { t.Error("b ran"); return "", nil }},
		})
		fe, ok := errors.AsType[*fallback.Error](err)
		if !ok || fe.Stop != fallback.StopCanceled || !errors.Is(err, context.Canceled) || fe.Untried != 1 {
			t.Errorf("cancel: %v", err)
		}
		// The caller's deadline bounds all alternatives together: the
		// second gets what is left.
		ctx2, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel2()
		dl := must[*deadline.Deadline](t)(deadline.New(deadline.Config{Timeout: 2 * time.Second}))
		slow := func(ctx context.Context) (string, error) { <-ctx.Done(); return "", ctx.Err() }
		start := time.Now()
		_, err = fallback.Do(ctx2, fallback.Config{}, []fallback.Alternative[string]{
			{Name: "a", Policy: dl, Fn: slow}, {Name: "b", Policy: dl, Fn: slow}, {Name: "c", Fn: slow},
		})
		fe, ok = errors.AsType[*fallback.Error](err)
		if !ok || fe.Stop != fallback.StopCanceled || len(fe.Tried) != 2 || fe.Untried != 1 ||
			!errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 3*time.Second {
			t.Errorf("deadline: %v after %v", err, time.Since(start))
		}
		// A context already done runs nothing.
		_, err = fallback.Do(ctx, fallback.Config{}, []fallback.Alternative[string]{{Name: "a", Fn: slow}})
		if fe, ok := errors.AsType[*fallback.Error](err); !ok || len(fe.Tried) != 0 || fe.Untried != 1 || !errors.Is(err, context.Canceled) {
			t.Errorf("done ctx: %v", err)
		}
	})
}

// After fn delivered part of its answer, a failure neither falls back nor
// is retried by the alternative's own retry.
func TestNoFallbackAfterDelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := must[*retry.Retry](t)(retry.New(retry.Config{MaxAttempts: 3, InitialInterval: time.Millisecond}))
		at := must[*deadline.Deadline](t)(deadline.New(deadline.Config{Timeout: time.Second}))
		p := must[*compose.Pipeline](t)(compose.New("openai", compose.Policies{Retry: rt, Attempt: at}))
		var attempts atomic.Int32
		var chunks []string
		_, err := fallback.Do(context.Background(), fallback.Config{}, []fallback.Alternative[string]{
			{Name: "openai", Policy: p, Fn: func(ctx context.Context) (string, error) {
				attempts.Add(1)
				chunks = append(chunks, "Hel")
				fallback.MarkDelivered(ctx)
				if !fallback.Delivered(ctx) {
					t.Error("Delivered is false after MarkDelivered")
				}
				<-ctx.Done() // the stream stalls: our timeout cuts it
				return "", ctx.Err()
			}},
			{Name: "anthropic", Fn: func(context.Context) (string, error) {
				chunks = append(chunks, "Hello")
				return "Hello", nil
			}},
		})
		fe, ok := errors.AsType[*fallback.Error](err)
		if !ok || fe.Stop != fallback.StopDelivered || !errors.Is(err, deadline.ErrExceeded) {
			t.Fatalf("err = %v", err)
		}
		if attempts.Load() != 1 || len(chunks) != 1 {
			t.Errorf("%d attempts, chunks %q: a delivered stream was repeated", attempts.Load(), chunks)
		}
		if !strings.Contains(err.Error(), "failed after delivering part of the answer") {
			t.Errorf("message %q", err.Error())
		}
		// Without the mark the same failure is retried and then falls back.
		attempts.Store(0)
		chunks = nil
		got, err := fallback.Do(context.Background(), fallback.Config{}, []fallback.Alternative[string]{
			{Name: "openai", Policy: p, Fn: func(ctx context.Context) (string, error) {
				attempts.Add(1)
				<-ctx.Done()
				return "", ctx.Err()
			}},
			{Name: "anthropic", Fn: func(context.Context) (string, error) { return "Hello", nil }},
		})
		if err != nil || got != "Hello" || attempts.Load() != 3 {
			t.Errorf("unmarked: %q, %v after %d attempts", got, err, attempts.Load())
		}
		fallback.MarkDelivered(context.Background()) // outside Do: nothing
		if fallback.Delivered(context.Background()) {
			t.Error("Delivered outside Do")
		}
	})
}

func TestInvalidAlternatives(t *testing.T) {
	ok := func(context.Context) (int, error) { return 1, nil }
	for _, tt := range []struct {
		alts []fallback.Alternative[int]
		want string
	}{
		{nil, "fallback: no alternatives"},
		{[]fallback.Alternative[int]{{Name: "a", Fn: ok}, {Fn: ok}}, "alternatives[1].Name"},
		{[]fallback.Alternative[int]{{Name: "a"}}, "alternatives[0].Fn"},
	} {
		_, err := fallback.Do(context.Background(), fallback.Config{}, tt.alts)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Do(%v) = %v, want an error naming %s", tt.alts, err, tt.want)
		}
	}
	defer func() {
		if r := recover(); r != "fallback: nil Context" {
			t.Errorf("recover() = %v", r)
		}
	}()
	fallback.Do(nil, fallback.Config{}, []fallback.Alternative[int]{{Name: "a", Fn: ok}}) //nolint:staticcheck // the point
}

// A panic goes on up, the alternative's bulkhead slot is freed, and no
// later alternative runs.
func TestPanicGoesUp(t *testing.T) {
	bh := must[*bulkhead.Bulkhead](t)(bulkhead.New(bulkhead.Config{Limit: 1}))
	defer bh.Close()
	defer func() {
		if r := recover(); r != "boom" {
			t.Errorf("recover() = %v", r)
		}
		if bh.Active() != 0 {
			t.Errorf("slot held after a panic")
		}
	}()
	fallback.Do(context.Background(), fallback.Config{}, []fallback.Alternative[int]{
		{Name: "a", Policy: bh, Fn: func(context.Context) (int, error) { panic("boom") }},
		{Name: "b", Fn: func(context.Context) (int, error) { t.Error("b ran"); return 0, nil }},
	})
}

func TestTelemetry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "call")
	cfg := fallback.Config{Name: "chat", MeterProvider: mp}
	for range 2 {
		_, err := fallback.Do(ctx, cfg, []fallback.Alternative[int]{
			{Name: "openai", Fn: func(context.Context) (int, error) { return 0, &httppolicy.StatusError{StatusCode: 429} }},
			{Name: "anthropic", Fn: func(context.Context) (int, error) { return 1, nil }},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	span.End()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want := attribute.NewSet(
		attribute.String("watertight.policy.kind", "fallback"), attribute.String("watertight.policy.name", "chat"),
		attribute.String("watertight.fallback.from", "openai"), attribute.String("watertight.fallback.to", "anthropic"),
		attribute.String("watertight.fallback.reason", "429"))
	var got int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "watertight.fallbacks" {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					if dp.Attributes.Equals(&want) {
						got = dp.Value
					}
				}
			}
		}
	}
	if got != 2 {
		t.Errorf("watertight.fallbacks{openai>anthropic, 429} = %d, want 2", got)
	}
	events := sr.Ended()[0].Events()
	if len(events) != 2 || events[0].Name != "watertight.fallback" {
		t.Fatalf("events %v", events)
	}
	ev := attribute.NewSet(events[0].Attributes...)
	if !ev.Equals(&want) {
		t.Errorf("event attributes %v", events[0].Attributes)
	}
}

// The fallbacks counter comes from the meter every other watertight
// instrument of the same MeterProvider comes from (telemetry.MeterOf):
// one scope, named and versioned alike, so a dashboard selects them
// together. A nil pointer for a MeterProvider means the global one, as
// for the policies, and panics nowhere.
func TestTelemetryScope(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	alts := []fallback.Alternative[int]{
		{Name: "a", Fn: func(context.Context) (int, error) { return 0, &httppolicy.StatusError{StatusCode: 429} }},
		{Name: "b", Fn: func(context.Context) (int, error) { return 1, nil }},
	}
	if _, err := fallback.Do(context.Background(), fallback.Config{Name: "scope", MeterProvider: mp}, alts); err != nil {
		t.Fatal(err)
	}
	telemetry.NewInstruments(mp).Rejections.Add(context.Background(), 1)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	scopes := map[string]instrumentation.Scope{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			scopes[m.Name] = sm.Scope
		}
	}
	fs, ok := scopes["watertight.fallbacks"]
	if !ok {
		t.Fatalf("no watertight.fallbacks in %v", scopes)
	}
	if rs := scopes["watertight.rejections"]; fs != rs || fs.Name != telemetry.ScopeName || fs.Version != telemetry.Version {
		t.Errorf("watertight.fallbacks in scope %+v, watertight.rejections in %+v; want one scope, %s at %s",
			fs, rs, telemetry.ScopeName, telemetry.Version)
	}

	var nilMP *sdkmetric.MeterProvider
	if _, err := fallback.Do(context.Background(), fallback.Config{Name: "nil", MeterProvider: nilMP}, alts); err != nil {
		t.Fatal(err)
	}
}

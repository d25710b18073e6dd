package compose_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// rejectingStage rejects through the shared telemetry path, as the built-in
// policies do.
type rejectingStage struct{ r *telemetry.Rejection }

func (s *rejectingStage) Execute(ctx context.Context, fn policy.Func) error {
	return s.r.Record(ctx)
}

func newTracing(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return sr, tp
}

func attrOf(kvs []attribute.KeyValue, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func TestSpans(t *testing.T) {
	sr, tp := newTracing(t)
	rt, err := retry.New(retry.Config{MaxAttempts: 3, NewSchedule: func() backoff.BackOff { return &backoff.ZeroBackOff{} }})
	if err != nil {
		t.Fatal(err)
	}
	p, err := compose.New("llm", compose.Policies{
		Retry:   rt,
		Breaker: &fakeStage{name: "breaker"},
	}, compose.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	n := 0
	err = p.Execute(context.Background(), func(ctx context.Context) error {
		n++
		if n < 3 {
			return boom
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	spans := sr.Ended()
	if len(spans) != 4 {
		t.Fatalf("got %d spans, want 3 attempts + 1 call", len(spans))
	}
	call := spans[3]
	if call.Name() != "watertight llm" || call.Status().Code == codes.Error {
		t.Errorf("call span %q status %v", call.Name(), call.Status())
	}
	if v, _ := attrOf(call.Attributes(), telemetry.KeyPipeline); v.AsString() != "llm" {
		t.Errorf("pipeline attribute = %v", v)
	}
	for _, s := range spans {
		if sc := s.InstrumentationScope(); sc.Name != telemetry.ScopeName || sc.Version != telemetry.Version {
			t.Errorf("span %q scope = %+v, want %s version %s", s.Name(), sc, telemetry.ScopeName, telemetry.Version)
		}
	}
	for i, s := range spans[:3] {
		if s.Name() != "watertight llm attempt" || s.Parent().SpanID() != call.SpanContext().SpanID() {
			t.Errorf("attempt span %d: %q, parent %v", i, s.Name(), s.Parent().SpanID())
		}
		if v, _ := attrOf(s.Attributes(), telemetry.KeyAttempt); v.AsInt64() != int64(i+1) {
			t.Errorf("attempt span %d: attempt attribute %v", i, v)
		}
		wantErr := i < 2
		if (s.Status().Code == codes.Error) != wantErr {
			t.Errorf("attempt span %d: status %v", i, s.Status())
		}
	}
}

func TestRejectionSpan(t *testing.T) {
	sr, tp := newTracing(t)
	in := telemetry.NewInstruments(nil)
	p, _ := compose.New("llm", compose.Policies{
		Bulkhead: &rejectingStage{telemetry.Rejecter{In: in, Kind: "bulkhead", Name: "llm"}.New("full", nil)},
	}, compose.WithTracerProvider(tp))
	err := p.Execute(context.Background(), func(context.Context) error { return nil })
	if !errors.Is(err, policy.ErrRejected) {
		t.Fatalf("err = %v", err)
	}
	spans := sr.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	s := spans[0]
	if s.Status().Code != codes.Error {
		t.Errorf("status %v", s.Status())
	}
	if v, _ := attrOf(s.Attributes(), telemetry.KeyError); v.AsString() != "rejected" {
		t.Errorf("error.type = %v", v)
	}
	ev := s.Events()
	if len(ev) != 1 || ev[0].Name != "watertight.rejected" {
		t.Fatalf("events %v", ev)
	}
	for k, want := range map[attribute.Key]string{
		telemetry.KeyKind: "bulkhead", telemetry.KeyName: "llm", telemetry.KeyReason: "full",
	} {
		if v, _ := attrOf(ev[0].Attributes, k); v.AsString() != want {
			t.Errorf("event %s = %v, want %s", k, v, want)
		}
	}
}

func TestDurationHistogram(t *testing.T) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	defer mp.Shutdown(context.Background())
	p, _ := compose.New("llm", compose.Policies{}, compose.WithMeterProvider(mp),
		compose.WithTracerProvider(noop.NewTracerProvider()))
	ctx := context.Background()
	p.Execute(ctx, func(context.Context) error { return nil })
	p.Execute(ctx, func(context.Context) error { return nil })
	p.Execute(ctx, func(context.Context) error { return context.DeadlineExceeded })
	p.Execute(ctx, func(context.Context) error { return errors.New("x") })

	var rm metricdata.ResourceMetrics
	if err := r.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != telemetry.ScopeName || sm.Scope.Version != telemetry.Version {
			t.Errorf("scope %+v, want %s version %s", sm.Scope, telemetry.ScopeName, telemetry.Version)
		}
		for _, m := range sm.Metrics {
			if m.Name != "watertight.call.duration" || m.Unit != "s" {
				t.Errorf("unexpected metric %s (%s)", m.Name, m.Unit)
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				if len(dp.Bounds) == 0 || dp.Bounds[0] != 0.001 {
					t.Errorf("bounds %v, want seconds starting at 1ms", dp.Bounds)
				}
				if v, _ := dp.Attributes.Value(telemetry.KeyPipeline); v.AsString() != "llm" {
					t.Errorf("pipeline attribute %v", v)
				}
				et, _ := dp.Attributes.Value(telemetry.KeyError)
				counts[et.AsString()] += dp.Count
			}
		}
	}
	want := map[string]uint64{"": 2, "timeout": 1, "_OTHER": 1}
	if len(counts) != len(want) {
		t.Errorf("counts %v, want %v", counts, want)
	}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("error.type %q: %d calls, want %d", k, counts[k], v)
		}
	}
}

// lateInstallDone records that TestGlobalProviderLateInstall ran: otel's
// global provider delegates to the first provider set, once per process.
var lateInstallDone bool

// A pipeline built before the SDK is installed globally starts spans once
// it is, and none while the global provider is a no-op.
func TestGlobalProviderLateInstall(t *testing.T) {
	if lateInstallDone {
		t.Skip("otel's global TracerProvider delegates only to the first provider set in a process; this ran already (-count > 1)")
	}
	lateInstallDone = true
	p, _ := compose.New("late", compose.Policies{})
	sr, tp := newTracing(t)
	fn := func(context.Context) error { return nil }
	p.Execute(context.Background(), fn)
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(noop.NewTracerProvider())
	p.Execute(context.Background(), fn)
	if got := len(sr.Ended()); got != 1 {
		t.Errorf("%d spans after the SDK was installed, want 1", got)
	} else if v := sr.Ended()[0].InstrumentationScope().Version; v != telemetry.Version {
		t.Errorf("span from the global provider: scope version %q, want %q", v, telemetry.Version)
	}
	otel.SetTracerProvider(noop.NewTracerProvider())
	p.Execute(context.Background(), fn)
	if got := len(sr.Ended()); got != 1 {
		t.Errorf("%d spans after the global provider became a no-op, want still 1", got)
	}
}

// The duration histogram records the call's duration whether it is read
// from a recording SDK span's own timestamps or from the clock.
func TestDurationValue(t *testing.T) {
	for _, traced := range []bool{true, false} {
		t.Run(map[bool]string{true: "from the span", false: "from the clock"}[traced], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := sdkmetric.NewManualReader()
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
				defer mp.Shutdown(context.Background())
				var tp trace.TracerProvider = noop.NewTracerProvider()
				if traced {
					sdk := sdktrace.NewTracerProvider()
					defer sdk.Shutdown(context.Background())
					tp = sdk
				}
				p, _ := compose.New("llm", compose.Policies{}, compose.WithMeterProvider(mp), compose.WithTracerProvider(tp))
				p.Execute(context.Background(), func(context.Context) error {
					time.Sleep(150 * time.Millisecond)
					return nil
				})
				var rm metricdata.ResourceMetrics
				if err := r.Collect(context.Background(), &rm); err != nil {
					t.Fatal(err)
				}
				dp := rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Histogram[float64]).DataPoints[0]
				if dp.Count != 1 || dp.Sum != 0.15 {
					t.Errorf("count %d, sum %v; want 1 call of 0.15 s", dp.Count, dp.Sum)
				}
			})
		})
	}
}

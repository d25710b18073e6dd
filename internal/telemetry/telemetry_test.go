package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

type typed struct{}

func (typed) Error() string     { return "typed" }
func (typed) ErrorType() string { return "custom" }

func TestErrorType(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{policy.NewRejectedError("b", "n", "full", nil), "rejected"},
		{fmt.Errorf("x: %w", policy.ErrRejected), "rejected"},
		{context.DeadlineExceeded, "timeout"},
		{fmt.Errorf("x: %w", context.Canceled), "canceled"},
		{policy.ErrAborted, "aborted"},
		{fmt.Errorf("wrapped: %w", typed{}), "custom"},
		{errors.New("other"), "_OTHER"},
	}
	for _, tt := range tests {
		if got := telemetry.ErrorType(tt.err); got != tt.want {
			t.Errorf("ErrorType(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestRejectionRecord(t *testing.T) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	defer mp.Shutdown(context.Background())
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())

	rej := telemetry.Rejecter{In: telemetry.NewInstruments(mp), Kind: "bulkhead", Name: "llm"}.New("full", nil)
	ctx, span := tp.Tracer("t").Start(context.Background(), "call")
	if err := rej.Record(ctx); err != rej.Err || !errors.Is(err, policy.ErrRejected) {
		t.Errorf("Record returned %v", err)
	}
	rej.Record(context.Background()) // no span: counted only
	span.End()

	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want := attribute.NewSet(telemetry.KeyKind.String("bulkhead"), telemetry.KeyName.String("llm"), telemetry.KeyReason.String("full"))
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telemetry.MetricRejections {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if dp.Attributes.Equals(&want) && dp.Value == 2 {
					found = true
				}
			}
		}
	}
	if !found {
		t.Errorf("no rejections data point of 2 with %v in %+v", want.Encoded(attribute.DefaultEncoder()), rm)
	}
	ev := sr.Ended()[0].Events()
	if len(ev) != 1 || ev[0].Name != telemetry.EventRejected || len(ev[0].Attributes) != 3 {
		t.Errorf("events %+v", ev)
	}
}

// A typed nil provider in a Config means "unset", not a panic at New.
func TestTypedNilProviders(t *testing.T) {
	in := telemetry.NewInstruments((*sdkmetric.MeterProvider)(nil))
	in.Rejections.Add(context.Background(), 1)
	telemetry.NewTracer((*sdktrace.TracerProvider)(nil)).Tracer()
}

func TestTracerNoop(t *testing.T) {
	if telemetry.NewTracer(noop.NewTracerProvider()).Tracer() != nil {
		t.Error("a no-op provider gave a tracer")
	}
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	if telemetry.NewTracer(tp).Tracer() == nil {
		t.Error("an SDK provider gave no tracer")
	}
	var zero telemetry.Tracer
	if zero.Tracer() != nil {
		t.Error("the zero Tracer gave a tracer")
	}
}

// Every meter and tracer carries the scope name and the instrumentation
// version, which exporters turn into otel_scope_version and the like.
func TestInstrumentationScope(t *testing.T) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	defer mp.Shutdown(context.Background())
	telemetry.NewInstruments(mp).Timeouts.Add(context.Background(), 1)
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if len(rm.ScopeMetrics) != 1 {
		t.Fatalf("%d scopes, want 1: %+v", len(rm.ScopeMetrics), rm.ScopeMetrics)
	}
	if sc := rm.ScopeMetrics[0].Scope; sc.Name != telemetry.ScopeName || sc.Version != telemetry.Version || telemetry.Version == "" {
		t.Errorf("meter scope = %+v, want %s version %s", sc, telemetry.ScopeName, telemetry.Version)
	}

	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	_, span := telemetry.NewTracer(tp).Tracer().Start(context.Background(), "call")
	span.End()
	if sc := sr.Ended()[0].InstrumentationScope(); sc.Name != telemetry.ScopeName || sc.Version != telemetry.Version {
		t.Errorf("tracer scope = %+v, want %s version %s", sc, telemetry.ScopeName, telemetry.Version)
	}
}

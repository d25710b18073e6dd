package grpcpolicy_test

import (
	"context"
	"os"
	"regexp"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/watertight/watertight/grpcpolicy"
)

// Each stream timeout adds 1 to watertight.timeouts, with its kind and the
// Client's name, and an event to the span in the stream's context.
func TestStreamTimeoutTelemetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		defer tp.Shutdown(context.Background())

		c := newClient(t, grpcpolicy.ClientConfig{Policy: newBulkhead(t, "dep", 2, 0), Name: "inventory",
			FirstMessageTimeout: time.Second, IdleTimeout: time.Second, MeterProvider: mp})
		ctx, span := tp.Tracer("test").Start(t.Context(), "call")
		s := &fakeStreamer{feeds: feeds(2)}
		s.feeds[1] <- []byte("one")
		for range 2 {
			cs, err := c.StreamInterceptor()(ctx, watchDesc, nil, mWatch, s.streamer)
			if err != nil {
				t.Fatal(err)
			}
			recvAll(cs)
		}
		span.End()

		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			if sm.Scope.Name != "github.com/watertight/watertight/grpcpolicy" || sm.Scope.Version == "" {
				t.Errorf("scope %+v", sm.Scope)
			}
			for _, m := range sm.Metrics {
				if m.Name != "watertight.timeouts" || m.Unit != "{call}" {
					t.Errorf("metric %s (%s)", m.Name, m.Unit)
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					kind, _ := dp.Attributes.Value(attribute.Key("watertight.policy.kind"))
					name, _ := dp.Attributes.Value(attribute.Key("watertight.policy.name"))
					got[kind.AsString()+"/"+name.AsString()] += dp.Value
				}
			}
		}
		if len(got) != 2 || got["first_message/inventory"] != 1 || got["idle/inventory"] != 1 {
			t.Errorf("watertight.timeouts = %v, want one first_message and one idle for inventory", got)
		}
		var events []string
		for _, sp := range rec.Ended() {
			for _, ev := range sp.Events() {
				kind := ""
				for _, kv := range ev.Attributes {
					if kv.Key == "watertight.policy.kind" {
						kind = kv.Value.AsString()
					}
				}
				events = append(events, ev.Name+"/"+kind)
			}
		}
		if len(events) != 2 || events[0] != "watertight.timeout/first_message" || events[1] != "watertight.timeout/idle" {
			t.Errorf("span events %v", events)
		}
	})
}

// The names are the core module's own constants (internal/telemetry);
// the counter's description, which internal/telemetry keeps inside
// NewInstruments, is written here again: it must read the same.
func TestTelemetryDescriptionMatchesCore(t *testing.T) {
	ours, err := os.ReadFile("telemetry.go")
	if err != nil {
		t.Fatal(err)
	}
	instr, err := os.ReadFile("../internal/telemetry/instruments.go")
	if err != nil {
		t.Fatal(err)
	}
	desc := `Calls cut short by a watertight deadline\.`
	if !regexp.MustCompile(desc).Match(instr) || !regexp.MustCompile(desc).Match(ours) {
		t.Error("the watertight.timeouts description differs from the core module's")
	}
}

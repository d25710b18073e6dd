package redisstate_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/watertight/watertight/redisstate"
)

// TestFallbackSpanEvent: a call admitted by the fallback adds a
// watertight.redis.fallback event, with the mode, to the span in ctx.
func TestFallbackSpanEvent(t *testing.T) {
	s := startRedis(t)
	b := newBudget(t, redisstate.BudgetConfig{Name: "span", Limit: 1, Fallback: redisstate.FailOpen, Redis: rd(newClient(t, s.Addr()))})
	s.Kill()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "call")
	if err := b.Execute(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("fail-open: %v", err)
	}
	span.End()
	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans", len(ended))
	}
	for _, e := range ended[0].Events() {
		if e.Name == redisstate.EventFallback {
			for _, kv := range e.Attributes {
				if kv.Key == redisstate.KeyMode && kv.Value.AsString() == "fail_open" {
					return
				}
			}
			t.Fatalf("event without the mode: %v", e.Attributes)
		}
	}
	t.Fatalf("no %s event in %v", redisstate.EventFallback, ended[0].Events())
}

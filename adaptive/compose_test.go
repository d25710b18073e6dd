package adaptive_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
)

// TestInCompose: in a pipeline's Bulkhead slot the limiter runs in two
// phases and learns each attempt's latency from compose, timeouts included.
func TestInCompose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tt := range []struct {
			name string
			fn   func(ctx context.Context) error
			want time.Duration
		}{
			{"successes", func(context.Context) error { time.Sleep(5 * time.Millisecond); return nil }, 5 * time.Millisecond},
			{"timeouts", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, 30 * time.Millisecond},
		} {
			l := mustNew(t, adaptive.Config{Name: "dep"})
			at, err := deadline.New(deadline.Config{Timeout: 30 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			p, err := compose.New("x", compose.Policies{Bulkhead: l, Attempt: at})
			if err != nil {
				t.Fatal(err)
			}
			for range 128 {
				p.Execute(context.Background(), tt.fn)
			}
			if st := l.State(); !st.Measured || st.NoLoad != tt.want {
				t.Errorf("%s: %+v; want noLoad %v measured", tt.name, st, tt.want)
			}
			checkCounts(t, l, 0, 0)
		}
	})
}

// TestOnlyInBulkheadSlot: compose learns latencies only for the Bulkhead
// slot, so a limiter anywhere else fails at New with the slot named rather
// than sitting at its probe cap forever.
func TestOnlyInBulkheadSlot(t *testing.T) {
	l := mustNew(t, adaptive.Config{Name: "dep"})
	for name, p := range map[string]compose.Policies{
		"Deadline": {Deadline: l},
		"Retry":    {Retry: l},
		"Breaker":  {Breaker: l},
		"Attempt":  {Attempt: l},
	} {
		_, err := compose.New("x", p)
		if err == nil || !strings.Contains(err.Error(), "Policies."+name) || !strings.Contains(err.Error(), "Bulkhead slot") {
			t.Errorf("%s slot: err = %v; want an error naming the slot", name, err)
		}
	}
	if _, err := compose.New("x", compose.Policies{Bulkhead: l}); err != nil {
		t.Errorf("Bulkhead slot: %v", err)
	}
}

package compose_test

import (
	"strings"
	"testing"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/retry"
)

// A hedge takes no slot: New refuses a *retry.Hedge in any slot, naming
// the field and pointing to retry.Hedged around the pipeline.
func TestNewRefusesAHedgeInAnySlot(t *testing.T) {
	h, err := retry.NewHedge(retry.HedgeConfig{Delay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for field, p := range map[string]compose.Policies{
		"Bulkhead":  {Bulkhead: h},
		"Deadline":  {Deadline: h},
		"Retry":     {Retry: h},
		"RateLimit": {RateLimit: h},
		"Breaker":   {Breaker: h},
		"Attempt":   {Attempt: h},
	} {
		pl, err := compose.New("x", p)
		if pl != nil || err == nil || !strings.Contains(err.Error(), "Policies."+field+" is a *retry.Hedge") ||
			!strings.Contains(err.Error(), "retry.Hedged around the pipeline") {
			t.Errorf("%s: New = %v, %v; want an error naming the field and retry.Hedged", field, pl, err)
		}
	}
}

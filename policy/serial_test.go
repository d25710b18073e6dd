package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
)

// The policies that run fn once per call say so (policy.Concurrent), so a
// Do on one of them inside a hedged attempt neither asks the attempt's
// Claimer nor drops its own result (a Do on a policy that does not say
// publishes its value only once it has taken the claim).
func TestDoOnSerialPoliciesTakesNoClaim(t *testing.T) {
	bh, err := bulkhead.New(bulkhead.Config{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	br, err := breaker.New(breaker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dl, err := deadline.New(deadline.Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    policy.Policy
	}{{"bulkhead", bh}, {"breaker", br}, {"deadline", dl}} {
		t.Run(tc.name, func(t *testing.T) {
			if c, ok := tc.p.(policy.Concurrent); !ok || c.ConcurrentAttempts() {
				t.Fatalf("%T does not say it runs attempts one at a time", tc.p)
			}
			c := new(countingClaimer)
			ctx := policy.WithClaimer(context.Background(), c)
			v, err := policy.Do(ctx, tc.p, func(context.Context) (int, error) { return 7, nil })
			if c.asked.Load() != 0 || v != 7 || err != nil {
				t.Errorf("Claimer asked %d times, Do = %v, %v; want 0, 7, nil", c.asked.Load(), v, err)
			}
		})
	}
}

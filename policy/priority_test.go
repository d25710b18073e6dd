package policy_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/watertight/watertight/policy"
)

func TestPriorityOfDefaultsWhenAbsent(t *testing.T) {
	if p := policy.PriorityOf(context.Background()); p != policy.PriorityDefault {
		t.Errorf("PriorityOf(Background) = %v; want default", p)
	}
	ctx := policy.WithPriority(context.Background(), policy.PriorityCritical)
	ctx = context.WithValue(ctx, struct{}{}, 1)
	if p := policy.PriorityOf(ctx); p != policy.PriorityCritical {
		t.Errorf("PriorityOf = %v; want critical", p)
	}
}

func TestWithPriorityPanicsOnUnknownPriority(t *testing.T) {
	for _, p := range []policy.Priority{-2, 2, 127} {
		func() {
			defer func() {
				if r := recover(); r != fmt.Sprintf("policy: unknown Priority(%d)", p) {
					t.Errorf("WithPriority(%d): panic %v", p, r)
				}
			}()
			policy.WithPriority(context.Background(), p)
		}()
	}
}

func TestParsePriorityRoundTrips(t *testing.T) {
	for _, p := range []policy.Priority{policy.PrioritySheddable, policy.PriorityDefault, policy.PriorityCritical} {
		if got, err := policy.ParsePriority(p.String()); got != p || err != nil {
			t.Errorf("ParsePriority(%q) = %v, %v", p.String(), got, err)
		}
	}
	for _, s := range []string{"", "Critical", "high", "1"} {
		if got, err := policy.ParsePriority(s); got != policy.PriorityDefault || err == nil {
			t.Errorf("ParsePriority(%q) = %v, %v; want default and an error", s, got, err)
		}
	}
}

func ExampleWithPriority() {
	ctx := policy.WithPriority(context.Background(), policy.PriorityCritical)
	fmt.Println(policy.PriorityOf(ctx), policy.PriorityOf(context.Background()))
	// Output: critical default
}

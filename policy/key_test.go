package policy_test

import (
	"context"
	"testing"

	"github.com/watertight/watertight/policy"
)

func TestKey(t *testing.T) {
	ctx := context.Background()
	if k := policy.KeyOf(ctx); k != "" {
		t.Errorf("KeyOf(Background) = %q, want empty", k)
	}
	ctx = policy.WithKey(ctx, "tenant-a")
	if k := policy.KeyOf(policy.WithPriority(ctx, policy.PriorityCritical)); k != "tenant-a" {
		t.Errorf("KeyOf = %q, want tenant-a", k)
	}
	if k := policy.KeyOf(policy.WithKey(ctx, "b")); k != "b" {
		t.Errorf("KeyOf of a re-keyed ctx = %q, want b", k)
	}
	defer func() {
		if recover() == nil {
			t.Error("WithKey(nil) did not panic")
		}
	}()
	policy.WithKey(nil, "x") //lint:ignore SA1012 the panic is the point
}

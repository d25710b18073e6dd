package adaptive_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/policy"
)

// TestFairShareConfig: a key at its cap that may not wait is rejected
// key_full, its state goes with its last slot, and Update refuses to
// turn the fair share on or off.
func TestFairShareConfig(t *testing.T) {
	l := mustNew(t, adaptive.Config{Name: "llm", InitialLimit: 4, FairShare: true, MaxPerKey: 1})
	ctx := policy.WithKey(context.Background(), "tenant")
	p, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Acquire(ctx)
	var rej *policy.RejectedError
	if !errors.Is(err, adaptive.ErrFull) || !errors.As(err, &rej) || rej.Reason != adaptive.ReasonKeyFull {
		t.Fatalf("a second call of a key at its cap: %v; want a key_full rejection", err)
	}
	if n := l.Keys(); n != 1 {
		t.Fatalf("Keys = %d; want 1", n)
	}
	p.Release()
	if n := l.Keys(); n != 0 || l.Active() != 0 {
		t.Fatalf("Keys, Active = %d, %d after the release; want 0, 0", n, l.Active())
	}
	if err := l.Update(adaptive.Config{InitialLimit: 4}); err == nil || !strings.Contains(err.Error(), "FairShare") {
		t.Fatalf("Update turning FairShare off = %v; want an error naming FairShare", err)
	}
	if err := l.Update(adaptive.Config{FairShare: true, MaxPerKey: 2}); err != nil {
		t.Fatal(err)
	}
	if c := l.Config(); c.MaxPerKey != 2 {
		t.Fatalf("Config().MaxPerKey = %d; want 2", c.MaxPerKey)
	}
	if _, err := adaptive.New(adaptive.Config{MaxPerKey: 1}); err == nil || !strings.Contains(err.Error(), "MaxPerKey needs FairShare") {
		t.Fatalf("New with a cap and no fair share = %v", err)
	}
}

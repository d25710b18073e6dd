package bulkhead

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/watertight/watertight/policy"
)

func withKey(k string) context.Context { return policy.WithKey(context.Background(), k) }

// TestFairShareServesKeysInTurn: one tenant's flood of waiters and another
// tenant's single call share the slots freed.
func TestFairShareServesKeysInTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Name: "chat", Limit: 1, MaxQueue: Unbounded, FairShare: true})
		k := newBlocker(b)
		k.start(withKey("flood"), "h")
		for i := range 50 {
			k.start(withKey("flood"), "f"+strconv.Itoa(i))
		}
		k.start(withKey("quiet"), "q")
		k.release("h")
		k.release("f0")
		if got := k.order(); got != "h,f0,q" {
			t.Fatalf("ran %s; want h,f0,q", got)
		}
		k.release("q")
		for i := 1; i < 50; i++ {
			k.release("f" + strconv.Itoa(i))
		}
		checkCounts(t, b, 0, 0)
		if n := b.Keys(); n != 0 {
			t.Fatalf("Keys = %d after the calls; want 0", n)
		}
	})
}

// TestMaxPerKeyRejectsKeyFull: a key at its cap that may not wait is
// rejected key_full; a panicking fn frees its key's slot and state.
func TestMaxPerKeyRejectsKeyFull(t *testing.T) {
	b := mustNew(t, Config{Name: "api", Limit: 4, FairShare: true, MaxPerKey: 1})
	a := withKey("a")
	p, err := b.Acquire(a)
	if err != nil {
		t.Fatal(err)
	}
	checkRejection(t, b.Execute(a, func(context.Context) error { return nil }), "api", ReasonKeyFull)
	func() {
		defer func() { _ = recover() }()
		b.Execute(withKey("b"), func(context.Context) error { panic("boom") })
	}()
	if n := b.Keys(); n != 1 {
		t.Fatalf("Keys = %d; want 1 (a)", n)
	}
	p.Release()
	p.Release() // a second Release of the same Permit does nothing
	if n := b.Keys(); n != 0 || b.Active() != 0 {
		t.Fatalf("Keys, Active = %d, %d; want 0, 0", n, b.Active())
	}
}

// TestUpdateFairShare: Update refuses to turn the fair share on or off,
// naming the field, and changes MaxPerKey.
func TestUpdateFairShare(t *testing.T) {
	b := mustNew(t, Config{Limit: 2})
	err := b.Update(Config{Limit: 2, FairShare: true})
	if err == nil || !strings.Contains(err.Error(), "FairShare") {
		t.Fatalf("Update turning FairShare on = %v; want an error naming FairShare", err)
	}
	f := mustNew(t, Config{Limit: 2, FairShare: true})
	if err := f.Update(Config{Limit: 2}); err == nil || !strings.Contains(err.Error(), "FairShare") {
		t.Fatalf("Update turning FairShare off = %v; want an error naming FairShare", err)
	}
	if err := f.Update(Config{Limit: 2, MaxPerKey: 1}); err == nil || !strings.Contains(err.Error(), "MaxPerKey needs FairShare") {
		t.Fatalf("Update with a cap and no fair share = %v", err)
	}
	if err := f.Update(Config{Limit: 2, FairShare: true, MaxPerKey: 1}); err != nil {
		t.Fatal(err)
	}
	if c := f.Config(); !c.FairShare || c.MaxPerKey != 1 {
		t.Fatalf("Config after the update: FairShare %v, MaxPerKey %d", c.FairShare, c.MaxPerKey)
	}
	p, _ := f.Acquire(withKey("a"))
	defer p.Release()
	if _, err := f.Acquire(withKey("a")); !errors.Is(err, ErrFull) {
		t.Fatalf("second slot of a key at its cap: %v; want a rejection", err)
	}
}

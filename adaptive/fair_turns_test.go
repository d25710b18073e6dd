package adaptive_test

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/policy"
)

func withKey(k string) context.Context { return policy.WithKey(context.Background(), k) }

// TestFairShareServesKeysInTurn: inside one adaptive limit, a tenant's
// flood of waiters and another tenant's single call share the slots
// freed, and no key's state is left after.
func TestFairShareServesKeysInTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{MinLimit: 1, MaxLimit: 1, MaxQueue: -1, FairShare: true})
		k := newBlocker(l)
		k.start(withKey("flood"), "h")
		for i := range 20 {
			k.start(withKey("flood"), "f"+strconv.Itoa(i))
		}
		k.start(withKey("quiet"), "q")
		k.release("h")
		k.release("f0")
		if got := k.order(); got != "h,f0,q" {
			t.Fatalf("ran %s; want h,f0,q", got)
		}
		k.release("q")
		for i := 1; i < 20; i++ {
			k.release("f" + strconv.Itoa(i))
		}
		checkCounts(t, l, 0, 0)
		if n := l.Keys(); n != 0 {
			t.Fatalf("Keys = %d after the calls; want 0", n)
		}
	})
}

// TestFairSharePanicFreesKeysSlot: a panic in fn frees its slot and its
// key's count, so the key's next call is admitted.
func TestFairSharePanicFreesKeysSlot(t *testing.T) {
	l := mustNew(t, adaptive.Config{InitialLimit: 4, FairShare: true, MaxPerKey: 1})
	a := withKey("a")
	func() {
		defer func() { _ = recover() }()
		l.Execute(a, func(context.Context) error { panic("boom") })
	}()
	if n := l.Keys(); n != 0 || l.Active() != 0 {
		t.Fatalf("Keys, Active = %d, %d after the panic; want 0, 0", n, l.Active())
	}
	if err := l.Execute(a, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("the key's next call: %v", err)
	}
}

// TestMaxPerKeyValidation: New refuses a negative cap, naming MaxPerKey.
func TestMaxPerKeyValidation(t *testing.T) {
	_, err := adaptive.New(adaptive.Config{FairShare: true, MaxPerKey: -1})
	if err == nil || err.Error() != "adaptive: Config.MaxPerKey must be >= 0, got -1" {
		t.Fatalf("New with MaxPerKey -1 = %v", err)
	}
}

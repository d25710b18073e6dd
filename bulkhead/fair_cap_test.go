package bulkhead

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/watertight/watertight/policy"
)

// acquireOK takes a slot with ctx or fails the test.
func acquireOK(t *testing.T, b *Bulkhead, ctx context.Context) Permit {
	t.Helper()
	p, err := b.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return p
}

// TestFairShareKeylessCallsAreOneKey: calls without a key, or with the
// empty key, share one key's cap; Keys counts the keys given.
func TestFairShareKeylessCallsAreOneKey(t *testing.T) {
	b := mustNew(t, Config{Name: "api", Limit: 3, FairShare: true, MaxPerKey: 1})
	bg := context.Background()
	p := acquireOK(t, b, bg)
	defer p.Release()
	_, err := b.Acquire(bg)
	checkRejection(t, err, "api", ReasonKeyFull)
	_, err = b.Acquire(policy.WithKey(bg, ""))
	checkRejection(t, err, "api", ReasonKeyFull)
	q := acquireOK(t, b, withKey("a"))
	defer q.Release()
	if n := b.Keys(); n != 1 {
		t.Fatalf("Keys = %d; want 1 (a)", n)
	}
}

// TestUpdateRaisedMaxPerKeyWakesWaiters: a higher cap hands the slots it
// opens to the key's waiters at once.
func TestUpdateRaisedMaxPerKeyWakesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Limit: 3, MaxQueue: Unbounded, FairShare: true, MaxPerKey: 1}
		b := mustNew(t, cfg)
		k := newBlocker(b)
		for _, n := range []string{"a1", "a2", "a3"} {
			k.start(withKey("a"), n)
		}
		checkCounts(t, b, 1, 2)
		cfg.MaxPerKey = 3
		if err := b.Update(cfg); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		checkCounts(t, b, 3, 0)
		for _, n := range []string{"a1", "a2", "a3"} {
			k.release(n)
		}
		checkCounts(t, b, 0, 0)
	})
}

// TestUpdateMaxPerKeyCountsSlotsHeldUnderACap: a lower cap counts the
// slots the key holds under the old one, revoking none; slots taken with
// no cap set do not count against a cap set later.
func TestUpdateMaxPerKeyCountsSlotsHeldUnderACap(t *testing.T) {
	cfg := Config{Name: "api", Limit: 4, FairShare: true, MaxPerKey: 2}
	b := mustNew(t, cfg)
	a := withKey("a")
	p1, p2 := acquireOK(t, b, a), acquireOK(t, b, a)
	cfg.MaxPerKey = 1
	if err := b.Update(cfg); err != nil {
		t.Fatal(err)
	}
	_, err := b.Acquire(a)
	checkRejection(t, err, "api", ReasonKeyFull)
	p1.Release()
	_, err = b.Acquire(a)
	checkRejection(t, err, "api", ReasonKeyFull)
	p2.Release()
	p3 := acquireOK(t, b, a)
	p3.Release()

	cfg.MaxPerKey = 0
	if err := b.Update(cfg); err != nil {
		t.Fatal(err)
	}
	p4, p5 := acquireOK(t, b, a), acquireOK(t, b, a) // no cap: not counted
	cfg.MaxPerKey = 1
	if err := b.Update(cfg); err != nil {
		t.Fatal(err)
	}
	p6 := acquireOK(t, b, a)
	_, err = b.Acquire(a)
	checkRejection(t, err, "api", ReasonKeyFull)
	p4.Release()
	p5.Release()
	p6.Release()
	if n := b.Keys(); n != 0 || b.Active() != 0 {
		t.Fatalf("Keys, Active = %d, %d; want 0, 0", n, b.Active())
	}
}

// TestFairShareNoAllocs: with the fair share, and with a cap per key
// (whose key's state is reused), a keyed call that finds a free slot
// allocates nothing, and neither does a key_full rejection.
func TestFairShareNoAllocs(t *testing.T) {
	fn := func(context.Context) error { return nil }
	a := withKey("a")
	for _, perKey := range []int{0, 1} {
		b := mustNew(t, Config{Limit: 2, FairShare: true, MaxPerKey: perKey, MeterProvider: noop.NewMeterProvider()})
		if n := testing.AllocsPerRun(100, func() { b.Execute(a, fn) }); n != 0 {
			t.Errorf("MaxPerKey %d: Execute with a free slot: %v allocs; want 0", perKey, n)
		}
		if perKey == 0 {
			continue
		}
		p := acquireOK(t, b, a)
		if n := testing.AllocsPerRun(100, func() { b.Execute(a, fn) }); n != 0 {
			t.Errorf("key_full Execute: %v allocs; want 0", n)
		}
		p.Release()
	}
}

// TestMaxPerKeyValidation: New and Update refuse a negative cap and a
// cap without the fair share, naming MaxPerKey; a refused Update keeps
// the cap in force.
func TestMaxPerKeyValidation(t *testing.T) {
	for _, cfg := range []Config{
		{Limit: 2, FairShare: true, MaxPerKey: -1},
		{Limit: 2, MaxPerKey: 1},
	} {
		if _, err := New(cfg); err == nil || !strings.HasPrefix(err.Error(), "bulkhead: Config.MaxPerKey ") {
			t.Errorf("New(%+v) = %v; want an error naming Config.MaxPerKey", cfg, err)
		}
	}
	b := mustNew(t, Config{Limit: 2, FairShare: true, MaxPerKey: 1})
	if err := b.Update(Config{Limit: 2, FairShare: true, MaxPerKey: -1}); err == nil || !strings.Contains(err.Error(), "Config.MaxPerKey") {
		t.Fatalf("Update with a negative cap = %v", err)
	}
	if c := b.Config(); c.MaxPerKey != 1 {
		t.Fatalf("MaxPerKey after a refused Update = %d; want 1", c.MaxPerKey)
	}
}

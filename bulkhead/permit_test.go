package bulkhead_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
)

func newBulkhead(t *testing.T, cfg bulkhead.Config) *bulkhead.Bulkhead {
	t.Helper()
	b, err := bulkhead.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestPermitHoldsTheSlotUntilReleased checks that a slot taken with
// Acquire is held across function calls, as a websocket holds it, until
// Release hands it to the oldest waiter.
func TestPermitHoldsTheSlotUntilReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBulkhead(t, bulkhead.Config{Limit: 1, MaxQueue: 1})
		p, err := b.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if b.Active() != 1 {
			t.Fatalf("Active = %d after Acquire, want 1", b.Active())
		}
		got := make(chan error, 1)
		go func() {
			q, err := b.Acquire(context.Background())
			q.Release()
			got <- err
		}()
		synctest.Wait()
		if b.Queued() != 1 {
			t.Fatalf("Queued = %d, want the second Acquire waiting", b.Queued())
		}
		if _, err := b.Acquire(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("third Acquire = %v, want ErrFull", err)
		}
		p.Release()
		if err := <-got; err != nil {
			t.Fatalf("waiter's Acquire = %v, want the released slot", err)
		}
		synctest.Wait()
		if b.Active() != 0 || b.Queued() != 0 {
			t.Errorf("Active %d, Queued %d at the end, want 0, 0", b.Active(), b.Queued())
		}
	})
}

// TestPermitFailedAcquireHoldsNothing checks the outcomes of a failed
// Acquire: a rejection or the caller's ctx error, the zero Permit, whose
// Release does nothing.
func TestPermitFailedAcquireHoldsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBulkhead(t, bulkhead.Config{Limit: 1, MaxQueue: 1, MaxWait: time.Second})
		held, err := b.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release()
		p, err := b.Acquire(context.Background()) // waits MaxWait in vain
		var rej *policy.RejectedError
		if !errors.As(err, &rej) || rej.Reason != bulkhead.ReasonWaitTimeout || p != (bulkhead.Permit{}) {
			t.Fatalf("Acquire = %v, %v; want the zero Permit and a wait_timeout rejection", p, err)
		}
		p.Release() // no-op
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if p, err := b.Acquire(ctx); err != context.Canceled || p != (bulkhead.Permit{}) {
			t.Fatalf("Acquire(canceled) = %v, %v; want the zero Permit and context.Canceled", p, err)
		}
		if b.Active() != 1 {
			t.Errorf("Active = %d, want 1: failed Acquires and their Releases hold nothing", b.Active())
		}
	})
}

// TestPermitRejectionAllocatesNothing checks that a rejected Acquire, and an
// admitted Acquire with its Release, allocate nothing.
func TestPermitRejectionAllocatesNothing(t *testing.T) {
	b := newBulkhead(t, bulkhead.Config{Limit: 1})
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		p, _ := b.Acquire(ctx)
		p.Release()
	}); n != 0 {
		t.Errorf("Acquire+Release: %v allocs, want 0", n)
	}
	held, _ := b.Acquire(ctx)
	defer held.Release()
	if n := testing.AllocsPerRun(100, func() { b.Acquire(ctx) }); n != 0 {
		t.Errorf("rejected Acquire: %v allocs, want 0", n)
	}
}

package bulkhead_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
)

// acquireN takes n slots and returns them.
func acquireN(t *testing.T, b *bulkhead.Bulkhead, n int) []bulkhead.Permit {
	t.Helper()
	var ps []bulkhead.Permit
	for range n {
		p, err := b.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

// waitFor starts n callers that wait for a slot and, once given one, hold
// it until release is closed. It returns their outcomes' channel.
func waitFor(ctx context.Context, b *bulkhead.Bulkhead, n int, release <-chan struct{}) <-chan error {
	out := make(chan error, n)
	for range n {
		go func() {
			out <- b.Execute(ctx, func(context.Context) error { <-release; return nil })
		}()
	}
	return out
}

// TestUpdateLowerLimitRevokesNothing checks that a lower limit leaves the
// calls in flight running, and admits nobody until they drop below it.
func TestUpdateLowerLimitRevokesNothing(t *testing.T) {
	b := newBulkhead(t, bulkhead.Config{Limit: 3})
	held := acquireN(t, b, 3)
	if err := b.Update(bulkhead.Config{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	if b.Active() != 3 || b.Limit() != 1 {
		t.Fatalf("Active %d, Limit %d; want the 3 calls in flight kept, limit 1", b.Active(), b.Limit())
	}
	for i := range 3 {
		if _, err := b.Acquire(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("with %d of 3 released: err %v; want full", i, err)
		}
		held[i].Release()
	}
	p, err := b.Acquire(context.Background())
	if err != nil {
		t.Fatalf("all released: %v", err)
	}
	p.Release()
}

// TestUpdateHigherLimitWakesWaiters checks that a higher limit hands its
// new slots to the waiters at once.
func TestUpdateHigherLimitWakesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBulkhead(t, bulkhead.Config{Limit: 1, MaxQueue: 5})
		held := acquireN(t, b, 1)
		release := make(chan struct{})
		out := waitFor(context.Background(), b, 3, release)
		synctest.Wait()
		if err := b.Update(bulkhead.Config{Limit: 4, MaxQueue: 5}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if b.Active() != 4 || b.Queued() != 0 {
			t.Errorf("after raising the limit to 4: Active %d, Queued %d; want 4 and 0", b.Active(), b.Queued())
		}
		close(release)
		held[0].Release()
		for range 3 {
			if err := <-out; err != nil {
				t.Error(err)
			}
		}
	})
}

// TestUpdateShorterQueueKeepsWaiters checks that a shorter queue drops no
// waiter by itself: it turns newcomers away until the queue is below its
// new size, but for a newcomer of a higher priority, which takes the place
// of the newest waiter of a lower one, as in a full queue.
func TestUpdateShorterQueueKeepsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBulkhead(t, bulkhead.Config{Limit: 1, MaxQueue: 5})
		held := acquireN(t, b, 1)
		release := make(chan struct{})
		out := waitFor(context.Background(), b, 3, release)
		synctest.Wait()
		if err := b.Update(bulkhead.Config{Limit: 1, MaxQueue: 1}); err != nil {
			t.Fatal(err)
		}
		if b.Queued() != 3 {
			t.Fatalf("Queued %d after the queue shrank to 1; want the 3 waiters kept", b.Queued())
		}
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, bulkhead.ErrFull) {
			t.Errorf("a newcomer with 3 waiting and MaxQueue 1: %v; want full", err)
		}
		critical := waitFor(policy.WithPriority(context.Background(), policy.PriorityCritical), b, 1, release)
		synctest.Wait()
		var rej *policy.RejectedError
		if err := <-out; !errors.As(err, &rej) || rej.Reason != bulkhead.ReasonShed || b.Queued() != 3 {
			t.Errorf("a critical newcomer: a waiter ended with %v, %d queued; want the newest shed for it, 3 queued", err, b.Queued())
		}
		close(release)
		held[0].Release()
		for range 2 {
			if err := <-out; err != nil {
				t.Errorf("a waiter queued before the update: %v; want it served", err)
			}
		}
		if err := <-critical; err != nil {
			t.Errorf("the critical newcomer: %v; want it served", err)
		}
	})
}

// TestUpdateMaxWaitAppliesToNewWaiters checks that a shorter MaxWait
// applies to callers who queue after the update, and that those already
// waiting keep theirs.
func TestUpdateMaxWaitAppliesToNewWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBulkhead(t, bulkhead.Config{Limit: 1, MaxQueue: 5, MaxWait: 10 * time.Second})
		held := acquireN(t, b, 1)
		defer held[0].Release()
		start := time.Now()
		ended := func(out <-chan error) time.Duration {
			err := <-out
			if !errors.Is(err, bulkhead.ErrFull) {
				t.Errorf("err %v; want a wait_timeout rejection", err)
			}
			return time.Since(start)
		}
		before := waitFor(context.Background(), b, 1, nil)
		synctest.Wait()
		if err := b.Update(bulkhead.Config{Limit: 1, MaxQueue: 5, MaxWait: time.Second}); err != nil {
			t.Fatal(err)
		}
		after := waitFor(context.Background(), b, 1, nil)
		if got := ended(after); got != time.Second {
			t.Errorf("a waiter queued after the update waited %v; want 1s", got)
		}
		if got := ended(before); got != 10*time.Second {
			t.Errorf("a waiter queued before the update waited %v; want its 10s", got)
		}
	})
}

// TestUpdateReserve checks that a new Reserve applies to admissions at once.
func TestUpdateReserve(t *testing.T) {
	b := newBulkhead(t, bulkhead.Config{Limit: 2})
	held := acquireN(t, b, 1)
	defer held[0].Release()
	if err := b.Update(bulkhead.Config{Limit: 2, Reserve: map[policy.Priority]int{policy.PriorityCritical: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
		t.Errorf("a default call with the last slot reserved: %v; want full", err)
	}
	p, err := b.Acquire(policy.WithPriority(context.Background(), policy.PriorityCritical))
	if err != nil {
		t.Errorf("a critical call: %v; want the reserved slot", err)
	}
	p.Release()
}

// TestUpdateInvalidChangesNothing checks that an invalid Update returns
// New's error and leaves the settings in force, and that Update keeps the
// Name and hooks New was given.
func TestUpdateInvalidChangesNothing(t *testing.T) {
	rejected := 0
	in := bulkhead.Config{Name: "chat", Limit: 2, MaxQueue: 1, MaxWait: time.Second,
		OnReject: func(context.Context, *policy.RejectedError) { rejected++ }}
	b := newBulkhead(t, in)
	for _, bad := range []bulkhead.Config{
		{Limit: 0},
		{Limit: 2, MaxQueue: -2},
		{Limit: 2, MaxWait: -1},
		{Limit: 2, Reserve: map[policy.Priority]int{policy.PriorityCritical: 2}},
	} {
		_, want := bulkhead.New(bad)
		if err := b.Update(bad); err == nil || err.Error() != want.Error() {
			t.Errorf("Update(%+v) = %v; want New's error %v", bad, err, want)
		}
	}
	if got := b.Config(); got.Limit != 2 || got.MaxQueue != 1 || got.MaxWait != time.Second || b.Limit() != 2 {
		t.Errorf("after invalid updates: Config %+v, Limit %d; want the Config New was given", got, b.Limit())
	}
	if err := b.Update(bulkhead.Config{Name: "other", Limit: 1}); err != nil {
		t.Fatal(err)
	}
	held := acquireN(t, b, 1)
	defer held[0].Release()
	_, err := b.Acquire(context.Background())
	var rej *policy.RejectedError
	if !errors.As(err, &rej) || rej.Name != "chat" || rejected != 1 || b.Config().Name != "chat" || b.Config().OnReject == nil {
		t.Errorf("after Update with another Name: %v, %d hook calls, Config %+v; want Name chat and the hook kept", err, rejected, b.Config())
	}
}

// TestUpdateConcurrent runs calls from many goroutines while another
// updates the bulkhead with random valid and invalid configs: no slot is
// lost, no waiter is stranded, and Config is always the last valid one.
func TestUpdateConcurrent(t *testing.T) {
	b := newBulkhead(t, bulkhead.Config{Limit: 4, MaxQueue: 4})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				_ = b.Execute(ctx, func(context.Context) error { return nil })
				cancel()
			}
		})
	}
	last := b.Config()
	for range 2000 {
		cfg := bulkhead.Config{Limit: rand.IntN(6), MaxQueue: rand.IntN(6) - 2, MaxWait: time.Duration(rand.IntN(3)-1) * time.Millisecond}
		if err := b.Update(cfg); err == nil {
			last = cfg
		}
		if got := b.Config(); !reflect.DeepEqual(got, last) {
			t.Fatalf("Config %+v; want the last valid update %+v", got, last)
		}
	}
	// A last update with room, so that every waiter drains.
	if err := b.Update(bulkhead.Config{Limit: 4, MaxQueue: 4}); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if b.Active() != 0 || b.Queued() != 0 {
		t.Errorf("after the storm: Active %d, Queued %d; want 0 and 0", b.Active(), b.Queued())
	}
}

package bulkhead

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/watertight/watertight/policy"
)

// TestWaitersServedKeyByKey: policy.WithKey's doc (and those of
// httppolicy.HandlerConfig.Key and grpcpolicy.ServerConfig.Key) say that
// a bulkhead with a fair share serves its waiters key by key. With three
// waiters of key a queued before one of key b, a fair share serves b
// before a's third waiter.
func TestWaitersServedKeyByKey(t *testing.T) {
	b, err := New(Config{Limit: 1, MaxQueue: Unbounded, FairShare: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	hold, err := b.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i, k := range []string{"a", "a", "a", "b"} {
		wg.Go(func() {
			b.Execute(policy.WithKey(context.Background(), k), func(context.Context) error {
				mu.Lock()
				order = append(order, k)
				mu.Unlock()
				return nil
			})
		})
		for b.Queued() != i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	hold.Release()
	wg.Wait()
	if order[3] == "b" {
		t.Errorf("served in the order %v: key b waited behind all of key a's waiters", order)
	}
}

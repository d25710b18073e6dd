package bulkhead

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/policy"
)

// stormCtx returns the ctx of call i of a storm: a key among a few or
// invented, a priority, and for some a cancel that races the wait.
func stormCtx(r *rand.Rand, i int) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ctx = policy.WithPriority(ctx, policy.Priority(r.IntN(3)-1))
	switch r.IntN(4) {
	case 0: // no key
	case 1:
		ctx = policy.WithKey(ctx, "invented-"+strconv.Itoa(i))
	default:
		ctx = policy.WithKey(ctx, "tenant-"+strconv.Itoa(r.IntN(3)))
	}
	if r.IntN(8) == 0 {
		go cancel()
	}
	return ctx, cancel
}

// stormFn runs for a while, at times panicking.
func stormFn(r *rand.Rand, running *atomic.Int64, limit int64, over *atomic.Int64) func(context.Context) error {
	d, panics := time.Duration(r.IntN(3))*time.Millisecond, r.IntN(10) == 0
	return func(context.Context) error {
		if running.Add(1) > limit {
			over.Add(1)
		}
		defer running.Add(-1)
		time.Sleep(d)
		if panics {
			panic("fn")
		}
		return nil
	}
}

// TestFairShareStormLeavesNothing: calls with a few keys and many
// invented ones, of every priority, some canceled, some panicking, some
// timing out, while the cap per key changes, leave no slot, waiter (of any
// priority) or key's state behind, and never run more calls than the limit.
func TestFairShareStormLeavesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 4
		b := mustNew(t, Config{Limit: limit, MaxQueue: 6, MaxWait: 4 * time.Millisecond, FairShare: true, MaxPerKey: 1})
		var running, over atomic.Int64
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 1))
				for i := g * 1000; i < g*1000+300; i++ {
					ctx, cancel := stormCtx(r, i)
					func() {
						defer func() { _ = recover() }()
						_ = b.Execute(ctx, stormFn(r, &running, limit, &over))
					}()
					cancel()
				}
			})
		}
		wg.Go(func() {
			for i := range 200 {
				cfg := Config{Limit: limit, MaxQueue: 6, MaxWait: 4 * time.Millisecond, FairShare: true, MaxPerKey: i % 3}
				if err := b.Update(cfg); err != nil {
					t.Error(err)
				}
				time.Sleep(time.Millisecond)
			}
		})
		wg.Wait()
		checkCounts(t, b, 0, 0)
		if n := b.Keys(); n != 0 {
			t.Errorf("Keys = %d after the storm; want 0", n)
		}
		for _, p := range []policy.Priority{policy.PrioritySheddable, policy.PriorityDefault, policy.PriorityCritical} {
			if n := b.QueuedBy(p); n != 0 {
				t.Errorf("QueuedBy(%v) = %d after the storm; want 0", p, n)
			}
		}
		if n := over.Load(); n != 0 {
			t.Errorf("%d calls ran above the limit", n)
		}
	})
}

package adaptive_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/policy"
)

// stormCall makes call i of a storm: a key among a few or invented, a
// priority, at times a cancel racing the wait or a panic in fn.
func stormCall(l *adaptive.Limiter, r *rand.Rand, i int, running *atomic.Int64, over *atomic.Int64) {
	ctx, cancel := context.WithCancel(policy.WithPriority(context.Background(), policy.Priority(r.IntN(3)-1)))
	defer cancel()
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
	d, panics := time.Duration(r.IntN(3))*time.Millisecond, r.IntN(10) == 0
	defer func() { _ = recover() }()
	_ = l.Execute(ctx, func(context.Context) error {
		if running.Add(1) > 4 {
			over.Add(1)
		}
		defer running.Add(-1)
		time.Sleep(d)
		if panics {
			panic("fn")
		}
		return nil
	})
}

// TestFairShareStormLeavesNothing: calls with a few keys and many
// invented ones, of every priority, some canceled, some panicking, some
// timing out, while the cap per key changes, leave no slot, waiter (of any
// priority) or key's state behind, and never run more calls than the limit.
func TestFairShareStormLeavesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := adaptive.Config{MinLimit: 4, MaxLimit: 4, MaxQueue: 6, MaxWait: 4 * time.Millisecond, FairShare: true, MaxPerKey: 1}
		l := mustNew(t, cfg)
		var running, over atomic.Int64
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 2))
				for i := g * 1000; i < g*1000+300; i++ {
					stormCall(l, r, i, &running, &over)
				}
			})
		}
		wg.Go(func() {
			for i := range 200 {
				cfg.MaxPerKey = i % 3
				if err := l.Update(cfg); err != nil {
					t.Error(err)
				}
				time.Sleep(time.Millisecond)
			}
		})
		wg.Wait()
		checkCounts(t, l, 0, 0)
		if n := l.Keys(); n != 0 {
			t.Errorf("Keys = %d after the storm; want 0", n)
		}
		for _, p := range []policy.Priority{policy.PrioritySheddable, policy.PriorityDefault, policy.PriorityCritical} {
			if n := l.QueuedBy(p); n != 0 {
				t.Errorf("QueuedBy(%v) = %d after the storm; want 0", p, n)
			}
		}
		if n := over.Load(); n != 0 {
			t.Errorf("%d calls ran above the limit", n)
		}
	})
}

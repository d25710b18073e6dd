package redisstate_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/redisstate"
	"github.com/watertight/watertight/redisstate/internal/redistest"
)

// TestCluster runs the budget's storm and the shared breaker's propagation
// and probe on a real 3-node Redis Cluster on loopback: the keys of one
// policy share a hash tag, so its multi-key scripts run on one node, and
// its pub/sub reaches every replica.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client := func() redis.UniversalClient {
		c := redisstate.NewClient(&redis.UniversalOptions{Addrs: cl.Addrs(), PoolSize: 64})
		if _, ok := c.(*redis.ClusterClient); !ok {
			t.Fatalf("NewClient with 3 addresses gave a %T", c)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	// The budget: never over the limit, every lease given back.
	const limit = 4
	var budgets []*redisstate.Budget
	for range 3 {
		budgets = append(budgets, newBudget(t, redisstate.BudgetConfig{Name: "cluster", Limit: limit, MaxWait: 20 * time.Millisecond, Fallback: redisstate.FailClosed, Redis: rd(client())}))
	}
	var u upstream
	stop := make(chan struct{})
	time.AfterFunc(time.Second, func() { close(stop) })
	admitted, rejected := storm(t, budgets, 6, &u, stop)
	t.Logf("budget on the cluster: admitted %d, rejected %d, peak %d", admitted, rejected, u.peak.Load())
	if p := u.peak.Load(); p > limit || p < 2 {
		t.Fatalf("peak %d, limit %d", p, limit)
	}
	c := client()
	for _, b := range budgets {
		b.Close()
	}
	deadline := time.Now().Add(2 * time.Second)
	for zcard(t, c, leasesKey("cluster")) != 0 {
		if time.Now().After(deadline) {
			left, _ := c.ZRangeWithScores(context.Background(), leasesKey("cluster"), 0, -1).Result()
			var ids []string
			for _, b := range budgets {
				ids = append(ids, b.Replica())
			}
			t.Fatalf("leases left: %v (replicas %v, in flight %d %d %d)", left, ids, budgets[0].InFlight(), budgets[1].InFlight(), budgets[2].InFlight())
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The shared breaker: an open reaches the others by subscription (a
	// long PollInterval rules polling out), and one probe closes all.
	rs := make([]*redisstate.SharedBreaker, 3)
	for i := range rs {
		rs[i] = newShared(t, redisstate.BreakerConfig{
			Breaker:      breaker.Config{Name: "cluster", ConsecutiveFailures: 2, OpenTimeout: 300 * time.Millisecond},
			Redis:        rd(client()),
			PollInterval: time.Hour,
		})
	}
	time.Sleep(100 * time.Millisecond) // subscribed
	failN(rs[0], 2)
	eventually(t, 5*time.Second, "open on the others by subscription", func() bool {
		return rs[1].State() == breaker.Open && rs[2].State() == breaker.Open
	})
	// With polling off, no replica takes the probe lease: the test's own
	// poll interval is short enough for the rest.
	for _, r := range rs {
		r.Close()
	}
	for i := range rs {
		rs[i] = newShared(t, redisstate.BreakerConfig{
			Breaker:      breaker.Config{Name: "cluster", ConsecutiveFailures: 2, OpenTimeout: 300 * time.Millisecond},
			Redis:        rd(client()),
			PollInterval: 10 * time.Millisecond,
		})
	}
	eventually(t, 5*time.Second, "closed everywhere after a good probe", func() bool {
		all := true
		for _, r := range rs {
			r.Execute(context.Background(), func(context.Context) error { return nil })
			all = all && r.State() == breaker.Closed
		}
		return all
	})
}

package redisstate_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/policy"
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
		c := redisstate.NewClient(&redis.UniversalOptions{Addrs: cl.Addrs(), PoolSize: 64, // socket timeouts as newClient's
			DialTimeout: time.Second, ReadTimeout: patience, WriteTimeout: patience})
		if _, ok := c.(*redis.ClusterClient); !ok {
			t.Fatalf("NewClient with 3 addresses gave a %T", c)
		}
		t.Cleanup(func() { c.Close() })
		// A fresh cluster client's first round trips can fail (its slot
		// map not loaded yet, a node slow to answer on a loaded machine):
		// failed round trips would open the policies' guard on Redis, and
		// a release the guard refuses leaves its lease to lapse, as
		// designed, which the check of leases given back cannot tell from
		// a leak. So every node answers this client first.
		ok := 0
		eventually(t, patience, "the cluster client reaches every node", func() bool {
			err := c.(*redis.ClusterClient).ForEachShard(context.Background(), func(ctx context.Context, n *redis.Client) error {
				return n.Ping(ctx).Err()
			})
			if err != nil {
				ok = 0
				return false
			}
			ok++
			return ok >= 3
		})
		return c
	}

	// The budget: never over the limit, every lease given back (as in
	// TestBudgetStorm, no lease can lapse before the check gives up, and
	// no round trip is lost to a deadline).
	const limit = 4
	var budgets []*redisstate.Budget
	var unavailable atomic.Int64 // calls rejected because a round trip failed
	for range 3 {
		budgets = append(budgets, newBudget(t, redisstate.BudgetConfig{Name: "cluster", Limit: limit, MaxWait: 20 * time.Millisecond,
			Fallback: redisstate.FailClosed, LeaseTTL: 10 * time.Minute, Redis: patientRedis(client()),
			OnReject: func(_ context.Context, e *policy.RejectedError) {
				if e.Reason == redisstate.ReasonRedisUnavailable {
					unavailable.Add(1)
				}
			}}))
	}
	var u upstream
	admitted, rejected := storm(t, budgets, 6, &u, time.Second, 2)
	t.Logf("budget on the cluster: admitted %d, rejected %d, peak %d", admitted, rejected, u.peak.Load())
	if p := u.peak.Load(); p > limit || p < 2 {
		t.Fatalf("peak %d, limit %d", p, limit)
	}
	c := client()
	for _, b := range budgets {
		b.Close()
	}
	deadline := time.Now().Add(patience)
	for zcard(t, c, leasesKey("cluster")) != 0 {
		if time.Now().After(deadline) {
			left, _ := c.ZRangeWithScores(context.Background(), leasesKey("cluster"), 0, -1).Result()
			var ids []string
			for _, b := range budgets {
				ids = append(ids, b.Replica())
			}
			t.Fatalf("leases left: %v (replicas %v, in flight %d %d %d; %d calls rejected for Redis)", left, ids, budgets[0].InFlight(), budgets[1].InFlight(), budgets[2].InFlight(), unavailable.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The shared breaker: an open reaches the others by subscription (a
	// long PollInterval rules polling out), and one probe closes all.
	rs := make([]*redisstate.SharedBreaker, 3)
	for i := range rs {
		rs[i] = newShared(t, redisstate.BreakerConfig{
			Breaker:      breaker.Config{Name: "cluster", ConsecutiveFailures: 2, OpenTimeout: 300 * time.Millisecond},
			Redis:        patientRedis(client()),
			PollInterval: time.Hour,
		})
	}
	// Polling is off: a replica not yet subscribed would miss the open.
	eventually(t, patience, "every replica subscribed", func() bool {
		return clusterNumsub(t, cl, "{watertight:breaker:cluster}:events") == 3
	})
	failN(rs[0], 2)
	eventually(t, patience, "open on the others by subscription", func() bool {
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
			Redis:        patientRedis(client()),
			PollInterval: 10 * time.Millisecond,
		})
	}
	eventually(t, patience, "closed everywhere after a good probe", func() bool {
		all := true
		for _, r := range rs {
			r.Execute(context.Background(), func(context.Context) error { return nil })
			all = all && r.State() == breaker.Closed
		}
		return all
	})
}

// clusterNumsub returns the number of subscribers of channel summed over
// the nodes of cl (PUBSUB NUMSUB counts a node's own subscribers; a
// cluster's PUBLISH reaches every node), or -1 if a node did not answer.
func clusterNumsub(t testing.TB, cl *redistest.Cluster, channel string) int64 {
	var n int64
	for _, addr := range cl.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		m, err := c.PubSubNumSub(context.Background(), channel).Result()
		c.Close()
		if err != nil {
			return -1
		}
		n += m[channel]
	}
	return n
}

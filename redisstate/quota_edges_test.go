package redisstate_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/redisstate"
)

// TestQuotaForgedKeyOfAnotherType: a quota key that holds a value of
// another type (a hash, a list, a string where a sorted set is kept) is no
// number: it counts as none, and the quota goes on on Redis rather than
// on its fallback.
func TestQuotaForgedKeyOfAnotherType(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	ctx := context.Background()
	p := "{watertight:quota:wrongtype}:"
	forge := map[string]func(key string){
		"a hash":   func(key string) { c.HSet(ctx, key, "f", "1") },
		"a list":   func(key string) { c.RPush(ctx, key, "1") },
		"a string": func(key string) { c.Set(ctx, key, "1", 0) },
	}
	for _, tc := range []struct{ key, kind string }{
		{"requests", "a hash"}, {"tokens", "a list"}, {"hold", "a hash"},
		{"replicas", "a string"}, {"replicas:since", "a list"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			c.FlushAll(ctx)
			q := newQuota(t, redisstate.QuotaConfig{Name: "wrongtype", Redis: rd(c), Interval: time.Minute,
				Requests: 100, Burst: 100, Tokens: 1000, TokenBurst: 1000, Fallback: redisstate.FailClosed})
			if err := q.Take(ctx, 1, time.Now()); err != nil {
				t.Fatalf("Take before forging = %v", err)
			}
			c.Del(ctx, p+tc.key)
			forge[tc.kind](p + tc.key)
			for i := range 5 {
				if err := q.Take(ctx, 1, time.Now()); err != nil {
					t.Fatalf("with %s as %s, Take #%d = %v (reason %q), want admitted: the value counts as none",
						tc.key, tc.kind, i, err, reason(err))
				}
			}
		})
	}
}

// TestQuotaHugeCostRefunded: an attempt that declared a cost larger than
// one Interval's token quota, and failed, is settled at 0: refunded, so
// that the bucket is as full as before it.
func TestQuotaHugeCostRefunded(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	// A day's interval: nothing refills while the test runs.
	q := newQuota(t, redisstate.QuotaConfig{Name: "huge", Redis: rd(c), Interval: 24 * time.Hour, Tokens: 1000, TokenBurst: 1000})
	ctx := context.Background()
	if err := q.Take(ctx, 5000, time.Now()); err != nil {
		t.Fatalf("Take of a cost above the quota = %v, want admitted (the rest left as debt)", err)
	}
	q.Settle(5000, 0) // it failed: refunded
	key := "{watertight:quota:huge}:tokens"
	eventually(t, patience, "the refund reaches Redis", func() bool { return unsettled(q) == "0" })
	if err := q.Take(ctx, 1, time.Now()); err != nil {
		now, _ := c.Time(ctx).Result()
		t.Errorf("after the only attempt was refunded, Take(1) = %v; the tokens bucket is still %v ahead",
			err, time.Duration(getFloat(t, c, key)-float64(now.UnixMicro()))*time.Microsecond)
	}
}

// TestQuotaRefundsOfOneFlushAllCount: two failed attempts whose costs
// add up to more than one Interval's token quota are both refunded.
func TestQuotaRefundsOfOneFlushAllCount(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	q := newQuota(t, redisstate.QuotaConfig{Name: "refunds", Redis: rd(c), Interval: 24 * time.Hour, Tokens: 1000, TokenBurst: 2000})
	ctx := context.Background()
	for range 2 {
		if err := q.Take(ctx, 1000, time.Now()); err != nil {
			t.Fatalf("Take within TokenBurst = %v", err)
		}
	}
	q.Settle(1000, 0)
	q.Settle(1000, 0)
	eventually(t, patience, "the refunds reach Redis", func() bool { return unsettled(q) == "0" })
	if err := q.Take(ctx, 2000, time.Now()); err != nil {
		t.Errorf("after both attempts were refunded, Take(2000) = %v (reason %q), want admitted", err, reason(err))
	}
}

// unsettled returns the "tokens unsettled" field of q's report.
func unsettled(q *redisstate.Quota) string {
	for _, f := range q.Report().Fields {
		if f.Name == "tokens unsettled" {
			return f.Value
		}
	}
	return ""
}

// TestQuotaLocalShareBound: while Redis is away, a fleet of replicas that
// all hold the same replica count R is admitted at most the quota, its
// burst and the shares' bursts (R here, as each share bursts at least 1)
// in any Interval.
func TestQuotaLocalShareBound(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	const replicas = 20
	cfg := redisstate.QuotaConfig{Name: "shares", Redis: rd(c), Interval: time.Hour, Requests: 2, Burst: 2,
		Replicas: replicas}
	fleet := make([]*redisstate.Quota, replicas)
	for i := range fleet {
		fleet[i] = newQuota(t, cfg)
	}
	// Redis's burst, taken before it goes away.
	admitted := 0
	for range 10 {
		if fleet[0].Take(context.Background(), 0, time.Now()) == nil {
			admitted++
		}
	}
	s.Kill()
	start := time.Now()
	for _, q := range fleet {
		for range 10 {
			switch err := q.Take(context.Background(), 0, time.Now()); {
			case err == nil:
				admitted++
			case reason(err) != ratelimit.ReasonRate:
				t.Fatalf("Take = %v", err)
			}
		}
	}
	if el := time.Since(start); el > cfg.Interval {
		t.Skipf("took %v, longer than the Interval", el)
	}
	if most := int(cfg.Requests) + cfg.Burst + max(cfg.Burst, replicas); admitted > most {
		t.Errorf("%d admitted within one Interval across %d replicas holding R = %d, more than the quota, its burst and the shares' (%d)",
			admitted, replicas, replicas, most)
	}
}

// TestQuotaForgedReplicaKeys: the README lists :replicas and
// :replicas:since among the keys whose forged values count no further
// ahead than their bounds and are written back so. A member of :replicas
// whose expiry lies far ahead, or a :replicas:since in the future, is
// brought back within the replica TTL (30 s) by the next round trip.
func TestQuotaForgedReplicaKeys(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	ctx := context.Background()
	q := newQuota(t, redisstate.QuotaConfig{Name: "forgedrep", Redis: rd(c), Interval: time.Minute, Requests: 100})
	p := "{watertight:quota:forgedrep}:"
	if err := q.Take(ctx, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	far := float64(now.Add(1000 * time.Hour).UnixMilli())
	c.ZAdd(ctx, p+"replicas", redis.Z{Score: far, Member: "forged"})
	c.Set(ctx, p+"replicas:since", strconv.FormatFloat(far, 'f', 0, 64), 0)
	if err := q.Take(ctx, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	most := float64(now.Add(time.Minute).UnixMilli()) // the TTL, and then some
	if sc, err := c.ZScore(ctx, p+"replicas", "forged").Result(); err == nil && sc > most {
		t.Errorf("a forged replica's expiry %v ahead is kept after a round trip: it counts as a live replica for that long",
			time.Duration(sc-float64(now.UnixMilli()))*time.Millisecond)
	}
	if since := getFloat(t, c, p+"replicas:since"); since > float64(now.UnixMilli())+1000 {
		t.Errorf("a forged :replicas:since %v in the future is kept after a round trip: the count is never complete",
			time.Duration(since-float64(now.UnixMilli()))*time.Millisecond)
	}
}

package redisstate_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/redisstate"
)

// newQuota builds a Quota closed when the test ends.
func newQuota(t testing.TB, cfg redisstate.QuotaConfig) *redisstate.Quota {
	t.Helper()
	q, err := redisstate.NewQuota(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// reason returns the rejection reason of err, or "" if it is none.
func reason(err error) string {
	var re *policy.RejectedError
	if errors.As(err, &re) && errors.Is(err, ratelimit.ErrLimited) {
		return re.Reason
	}
	return ""
}

// getFloat reads key as a number, or -1 if it is absent.
func getFloat(t testing.TB, c redis.UniversalClient, key string) float64 {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s = %q: %v", key, v, err)
	}
	return f
}

// TestQuotaRequestsBurstThenPace: a fresh quota admits its burst at once;
// past it, an attempt that may not wait is rejected with reason "rate",
// and nothing more than the burst plus the rate times the time taken is
// admitted.
func TestQuotaRequestsBurstThenPace(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	q := newQuota(t, redisstate.QuotaConfig{Name: "pace", Redis: rd(c), Interval: time.Second, Requests: 10})
	start := time.Now()
	admitted := 0
	for range 30 {
		switch err := q.Take(context.Background(), 0, time.Now()); {
		case err == nil:
			admitted++
		case reason(err) != ratelimit.ReasonRate:
			t.Fatalf("Take = %v, want a rejection with reason rate", err)
		}
	}
	most := 10 + int(time.Since(start).Seconds()*10) + 1
	if admitted < 10 || admitted > most {
		t.Errorf("%d admitted at once, want 10 to %d", admitted, most)
	}
	// An attempt that may wait a second is admitted after its wait.
	if err := q.Take(context.Background(), 0, time.Now().Add(time.Second)); err != nil {
		t.Errorf("Take with a second to wait = %v", err)
	}
}

// TestQuotaTokensSettle: a settlement below the cost gives tokens back, so
// that an attempt refused before is admitted after; one above the token
// quota of an Interval is not believed.
func TestQuotaTokensSettle(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	// A day's interval: nothing refills while the test runs.
	q := newQuota(t, redisstate.QuotaConfig{Name: "tok", Redis: rd(c), Interval: 24 * time.Hour, Tokens: 1000, TokenBurst: 1000})
	now := func() time.Time { return time.Now() }
	if err := q.Take(context.Background(), 1000, now()); err != nil {
		t.Fatalf("the first Take = %v", err)
	}
	if err := q.Take(context.Background(), 1, now()); reason(err) != ratelimit.ReasonRate {
		t.Fatalf("Take of an empty bucket = %v, want reason rate", err)
	}
	q.Settle(1000, 1e9) // not believed: settles at 1000
	q.Settle(1000, 400) // gives back 600
	if err := q.Take(context.Background(), 600, now()); err != nil {
		t.Fatalf("Take after a refund = %v", err)
	}
	if err := q.Take(context.Background(), 1, now()); reason(err) != ratelimit.ReasonRate {
		t.Fatalf("Take past the refund = %v, want reason rate", err)
	}
}

// TestQuotaSettlementFlushed: a settlement no attempt carries reaches
// Redis on its own.
func TestQuotaSettlementFlushed(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	cfg := redisstate.QuotaConfig{Name: "flush", Redis: rd(c), Interval: 24 * time.Hour, Tokens: 1000, TokenBurst: 1000}
	q := newQuota(t, cfg)
	if err := q.Take(context.Background(), 1000, time.Now()); err != nil {
		t.Fatal(err)
	}
	key := "{watertight:quota:flush}:tokens"
	before := getFloat(t, c, key)
	q.Settle(1000, 0)
	eventually(t, patience, "the refund reaches Redis", func() bool { return getFloat(t, c, key) < before })
	other := newQuota(t, cfg)
	if err := other.Take(context.Background(), 1000, time.Now()); err != nil {
		t.Errorf("another replica's Take after the refund = %v", err)
	}
}

// TestQuotaHoldReachesEveryReplica: a hold one replica asks for holds the
// others: an attempt that cannot wait it out is rejected as throttled, one
// that can is admitted.
func TestQuotaHoldReachesEveryReplica(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	cfg := redisstate.QuotaConfig{Name: "hold", Redis: rd(c), Interval: time.Minute, Requests: 1000}
	a, b := newQuota(t, cfg), newQuota(t, cfg)
	a.Hold(300 * time.Millisecond)
	eventually(t, patience, "the hold reaches Redis", func() bool { return getFloat(t, c, "{watertight:quota:hold}:hold") > 0 })
	if err := b.Take(context.Background(), 0, time.Now()); reason(err) != ratelimit.ReasonThrottled {
		t.Fatalf("Take during a hold = %v, want reason throttled", err)
	}
	if err := b.Take(context.Background(), 0, time.Now().Add(time.Second)); err != nil {
		t.Fatalf("Take that may wait out the hold = %v", err)
	}
}

// TestQuotaThroughALimiter: a Limiter with the Quota as Shared settles an
// attempt at the usage it reports.
func TestQuotaThroughALimiter(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	q := newQuota(t, redisstate.QuotaConfig{Name: "lim", Redis: rd(c), Interval: 24 * time.Hour, Tokens: 1000, TokenBurst: 1000})
	l, err := ratelimit.New(ratelimit.Config{Shared: q, MaxWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := ratelimit.WithCost(context.Background(), 900)
	if err := l.Execute(ctx, func(ctx context.Context) error { ratelimit.ReportUsage(ctx, 100); return nil }); err != nil {
		t.Fatal(err)
	}
	// 900 charged, 800 given back: 900 left.
	if err := l.Execute(ratelimit.WithCost(context.Background(), 900), nopFn); err != nil {
		t.Errorf("Execute after the settlement = %v", err)
	}
	if err := l.Execute(ratelimit.WithCost(context.Background(), 100), nopFn); reason(err) != ratelimit.ReasonRate {
		t.Errorf("Execute past the quota = %v, want reason rate", err)
	}
}

func nopFn(context.Context) error { return nil }

// TestQuotaCanceledWaitGivesBack: a caller that gives up while it waits
// for its turn gives its units back.
func TestQuotaCanceledWaitGivesBack(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	q := newQuota(t, redisstate.QuotaConfig{Name: "cancel", Redis: rd(c), Interval: time.Hour, Requests: 2, Burst: 1})
	if err := q.Take(context.Background(), 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	key := "{watertight:quota:cancel}:requests"
	before := getFloat(t, c, key)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- q.Take(ctx, 0, time.Now().Add(time.Hour)) }()
	eventually(t, patience, "the waiter is charged", func() bool { return getFloat(t, c, key) > before })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Take = %v, want context.Canceled", err)
	}
	eventually(t, patience, "the waiter's unit is given back", func() bool { return getFloat(t, c, key) <= before+1 })
}

// TestQuotaForgedKeys: values in the quota's keys that are not numbers
// count as none; values too far ahead count as the horizon.
func TestQuotaForgedKeys(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	ctx := context.Background()
	cfg := redisstate.QuotaConfig{Name: "forged", Redis: rd(c), Interval: 50 * time.Millisecond, Requests: 5, Tokens: 5}
	q := newQuota(t, cfg)
	p := "{watertight:quota:forged}:"
	for _, v := range []string{"garbage", "nan", "-inf", "", "-1e300"} {
		c.Set(ctx, p+"requests", v, 0)
		c.Set(ctx, p+"tokens", v, 0)
		c.Set(ctx, p+"hold", v, 0)
		if err := q.Take(ctx, 1, time.Now()); err != nil {
			t.Errorf("with keys %q, Take = %v, want admitted", v, err)
		}
	}
	// Keys of another type are replaced.
	for _, k := range []string{"requests", "tokens", "hold", "replicas:since"} {
		c.Del(ctx, p+k)
		c.HSet(ctx, p+k, "f", "1")
	}
	c.Del(ctx, p+"replicas")
	c.RPush(ctx, p+"replicas", "x")
	if err := q.Take(ctx, 1, time.Now().Add(time.Second)); err != nil {
		t.Errorf("with keys of other types, Take = %v, want admitted", err)
	}
	if !reachable([]*redisstate.Quota{q}) {
		t.Errorf("with keys of other types, the script failed: %v", q.Report().Fields)
	}
	if ty := c.Type(ctx, p+"replicas").Val(); ty != "zset" {
		t.Errorf("replicas is a %s after a Take, want a zset", ty)
	}
	// A time far ahead counts as the burst plus two Intervals ahead (150
	// ms here): the attempt is refused, and the key is written back there.
	for _, v := range []string{"1e400", "inf", "99999999999999999999"} {
		c.Set(ctx, p+"requests", v, 0)
		c.Set(ctx, p+"hold", v, 0)
		if err := q.Take(ctx, 1, time.Now()); reason(err) == "" {
			t.Errorf("with keys %q, Take = %v, want a rejection", v, err)
		}
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got, most := getFloat(t, c, p+"requests"), float64(now.Add(150*time.Millisecond).UnixMicro()); got > most {
			t.Errorf("with keys %q, requests written back as %.0f, more than %.0f", v, got, most)
		}
		if pttl := c.PTTL(ctx, p+"requests").Val(); pttl <= 0 || pttl > 151*time.Millisecond {
			t.Errorf("with keys %q, requests expire in %v, want at most 151ms", v, pttl)
		}
	}
	eventually(t, patience, "a forged hold and requests lapse", func() bool {
		return q.Take(ctx, 1, time.Now().Add(50*time.Millisecond)) == nil
	})
}

// TestQuotaConfigRefused: New names the invalid field.
func TestQuotaConfigRefused(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	ok := redisstate.QuotaConfig{Name: "q", Redis: rd(c), Interval: time.Second, Requests: 1}
	nan := 0.0
	nan = nan / nan
	cases := []struct {
		edit func(*redisstate.QuotaConfig)
		want string
	}{
		{func(c *redisstate.QuotaConfig) { c.Name = "" }, "QuotaConfig.Name must not be empty"},
		{func(c *redisstate.QuotaConfig) { c.Interval = 0 }, "QuotaConfig.Interval must be > 0, got 0s"},
		{func(c *redisstate.QuotaConfig) { c.Interval = -time.Second }, "QuotaConfig.Interval must be > 0, got -1s"},
		{func(c *redisstate.QuotaConfig) { c.Requests = -1 }, "QuotaConfig.Requests must be a finite number >= 0, got -1"},
		{func(c *redisstate.QuotaConfig) { c.Requests = nan }, "QuotaConfig.Requests must be a finite number >= 0, got NaN"},
		{func(c *redisstate.QuotaConfig) { c.Tokens = 1 / nan * 0 }, "QuotaConfig.Tokens must be a finite number >= 0, got NaN"},
		{func(c *redisstate.QuotaConfig) { c.Requests = 0 }, "QuotaConfig.Requests and QuotaConfig.Tokens are both 0"},
		{func(c *redisstate.QuotaConfig) { c.Burst = -1 }, "QuotaConfig.Burst must be >= 0, got -1"},
		{func(c *redisstate.QuotaConfig) { c.TokenBurst = -1 }, "QuotaConfig.TokenBurst must be >= 0, got -1"},
		{func(c *redisstate.QuotaConfig) { c.Fallback = 7 }, "QuotaConfig.Fallback must be LocalShare, FailOpen or FailClosed, got 7"},
		{func(c *redisstate.QuotaConfig) { c.Replicas = -2 }, "QuotaConfig.Replicas must be >= 0, got -2"},
		{func(c *redisstate.QuotaConfig) { c.Redis.Client = nil }, "Config.Redis.Client"},
	}
	for _, tc := range cases {
		cfg := ok
		tc.edit(&cfg)
		q, err := redisstate.NewQuota(cfg)
		if err == nil {
			q.Close()
			t.Errorf("NewQuota accepted a config that should fail with %q", tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewQuota error %q, want it to contain %q", err, tc.want)
		}
	}
}

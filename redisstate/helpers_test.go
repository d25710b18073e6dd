package redisstate_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight/watertight/redisstate"
	"github.com/watertight/watertight/redisstate/internal/redistest"
)

// newClient returns a client of addr built by NewClient, closed when the
// test ends. Its socket timeouts are patience, not NewClient's 100 ms:
// with ContextTimeoutEnabled a round trip ends at the earlier of the two,
// so the policy's CallTimeout bounds it, as each test sets it (100 ms
// would cut short a patient round trip on a loaded machine, and the
// policy would fall back where the test counts on an answer).
func newClient(t testing.TB, addr string) redis.UniversalClient {
	t.Helper()
	c := redisstate.NewClient(&redis.UniversalOptions{Addrs: []string{addr}, PoolSize: 64, DialTimeout: time.Second,
		ReadTimeout: patience, WriteTimeout: patience})
	t.Cleanup(func() { c.Close() })
	return c
}

// startRedis starts a redis-server for the test (skipping it if there is
// none).
func startRedis(t testing.TB) *redistest.Server { return redistest.Start(t) }

// upstream is a fake dependency that counts the calls running in it at
// once and remembers the most.
type upstream struct {
	cur, peak, total atomic.Int64
}

// call runs one call to the upstream for d, or until ctx is done.
func (u *upstream) call(ctx context.Context, d time.Duration) error {
	n := u.cur.Add(1)
	defer u.cur.Add(-1)
	u.total.Add(1)
	for {
		p := u.peak.Load()
		if n <= p || u.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errBoom is a dependency's failure.
var errBoom = errors.New("boom")

// patience bounds the tests' waits for an event: generous, as a test
// fails only if the event never comes, and a loaded machine running
// -race can take seconds for what takes milliseconds when idle.
const patience = 30 * time.Second

// eventually polls cond every 5 ms until it holds or d has passed.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// zcard returns the number of members of key.
func zcard(t testing.TB, c redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := c.ZCard(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("ZCARD %s: %v", key, err)
	}
	return n
}

// rd returns the Redis settings of the tests that are not about a slow
// Redis: a CallTimeout of a second, as -race on a loaded machine can
// exceed the default 20 ms (and a test would then see the fallback).
func rd(c redis.UniversalClient) redisstate.Redis {
	return redisstate.Redis{Client: c, CallTimeout: time.Second}
}

// patientRedis returns the Redis settings of a test that counts on every
// round trip being answered (a lease given back at once, say): a
// CallTimeout of patience, which no round trip to a live loopback Redis
// reaches even at a load average of 15 under -race, so the local breaker
// on Redis never opens and no release is lost to a deadline.
func patientRedis(c redis.UniversalClient) redisstate.Redis {
	return redisstate.Redis{Client: c, CallTimeout: patience}
}

// fallbacks returns the watertight.redis.fallbacks counted by reader.
func fallbacks(t testing.TB, reader *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == redisstate.MetricFallbacks {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// meter returns a MeterProvider read by the returned reader, shut down
// when the test ends.
func meter(t testing.TB) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return mp, reader
}

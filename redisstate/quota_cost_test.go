package redisstate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/redisstate"
)

// TestQuotaOneRoundTrip: with the quota far from spent, an attempt through
// a Limiter with a Quota makes one Redis round trip, its settlement
// included (carried by the next attempt's). Take's latency is logged
// beside a PING's on the same client, interleaved.
func TestQuotaOneRoundTrip(t *testing.T) {
	s := startRedis(t)
	const n = 2000
	trips, el, take, ping := quotaCost(t, s.Addr(), n)
	// The flusher may send once per 100 ms in which no attempt went.
	if most := n + 1 + int64(el/(100*time.Millisecond)); trips > most {
		t.Errorf("%d round trips for %d attempts in %v, more than %d", trips, n, el, most)
	}
	t.Logf("%d attempts: %.3f round trips each; Execute p50 %v p99 %v; PING p50 %v p99 %v",
		n, float64(trips)/n, pct(take, .5), pct(take, .99), pct(ping, .5), pct(ping, .99))
}

// quotaCost runs n attempts through a Limiter with a Quota far from spent,
// each followed by a PING on the same client, and returns the round trips
// of the attempts, the time taken, and the latencies of both.
func quotaCost(t testing.TB, addr string, n int) (trips int64, el time.Duration, take, ping []time.Duration) {
	c, k := countedClient(t, addr)
	q := newQuota(t, redisstate.QuotaConfig{Name: "cost", Redis: mr(c), Interval: time.Second, Requests: 1e6, Tokens: 1e9})
	l, err := ratelimit.New(ratelimit.Config{Shared: q})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := ratelimit.WithCost(context.Background(), 100)
	used := func(ctx context.Context) error { ratelimit.ReportUsage(ctx, 60); return nil }
	l.Execute(ctx, used) // asks the version, loads the script
	k.n.Store(0)
	start := time.Now()
	for range n {
		t0 := time.Now()
		if err := l.Execute(ctx, used); err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		c.Ping(context.Background())
		take, ping = append(take, t1.Sub(t0)), append(ping, time.Since(t1))
	}
	return k.n.Load() - int64(n), time.Since(start), take, ping // less the PINGs
}

// TestQuotaFallbackModes: with Redis down, FailClosed rejects with reason
// "redis_unavailable", FailOpen admits, LocalShare admits this replica's
// share of the burst at once; each counts a fallback.
func TestQuotaFallbackModes(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	s.Kill()
	for _, mode := range []redisstate.Fallback{redisstate.FailClosed, redisstate.FailOpen, redisstate.LocalShare} {
		mp, reader := meter(t)
		q := newQuota(t, redisstate.QuotaConfig{Name: "modes", Redis: rd(c), Interval: time.Hour, Requests: 40,
			Burst: 8, Fallback: mode, Replicas: 4, MeterProvider: mp})
		admitted, rejected := 0, 0
		for range 10 {
			switch err := q.Take(context.Background(), 0, time.Now()); {
			case err == nil:
				admitted++
			case mode == redisstate.FailClosed && reason(err) == redisstate.ReasonRedisUnavailable:
				rejected++
			case mode == redisstate.LocalShare && reason(err) == ratelimit.ReasonRate:
				rejected++
			default:
				t.Fatalf("%v: Take = %v", mode, err)
			}
		}
		want := map[redisstate.Fallback]int{redisstate.FailClosed: 0, redisstate.FailOpen: 10, redisstate.LocalShare: 2}[mode]
		if admitted != want || admitted+rejected != 10 {
			t.Errorf("%v: %d admitted, %d rejected, want %d admitted (a share of 8/4 at once)", mode, admitted, rejected, want)
		}
		if n := fallbacks(t, reader); n != 10 {
			t.Errorf("%v: %d fallbacks counted, want 10", mode, n)
		}
	}
	// A canceled caller gets its ctx's error, not a fallback.
	q := newQuota(t, redisstate.QuotaConfig{Name: "modes", Redis: rd(c), Interval: time.Hour, Requests: 40})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.Take(ctx, 0, time.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Errorf("Take with a canceled ctx = %v", err)
	}
}

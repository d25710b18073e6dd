package redisstate_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/redisstate"
	"github.com/watertight/watertight/redisstate/internal/redistest"
)

// The figures of the README, measured against a real local redis-server:
//
//	REDISSTATE_MEASURE=1 go test -run TestMeasure -v -count=1 .
//
// Skipped otherwise: it takes about a minute and its figures are for
// reading, not asserting.

// mr returns the Redis settings of a measurement: the defaults, but for a
// CallTimeout taken from REDISSTATE_CALL_TIMEOUT if set (the default
// 20 ms is often missed on a heavily loaded VM).
func mr(c redis.UniversalClient) redisstate.Redis {
	d, _ := time.ParseDuration(os.Getenv("REDISSTATE_CALL_TIMEOUT"))
	return redisstate.Redis{Client: c, CallTimeout: d}
}

// counter is a go-redis hook that counts round trips (commands sent).
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(1); return next(ctx, cmds) }
}

// countedClient returns a NewClient client of addr with a round-trip
// counter. opts may change the options.
func countedClient(t testing.TB, addr string, opts ...func(*redis.UniversalOptions)) (redis.UniversalClient, *counter) {
	o := &redis.UniversalOptions{Addrs: []string{addr}, PoolSize: 64}
	for _, f := range opts {
		f(o)
	}
	c := redisstate.NewClient(o)
	var k counter
	c.AddHook(&k)
	t.Cleanup(func() { c.Close() })
	return c, &k
}

func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[int(q*float64(len(d)-1))]
}

func TestMeasure(t *testing.T) {
	if os.Getenv("REDISSTATE_MEASURE") == "" {
		t.Skip("set REDISSTATE_MEASURE=1 to measure the README's figures")
	}
	var out strings.Builder
	say := func(f string, a ...any) { fmt.Fprintf(&out, f+"\n", a...) }
	say("CallTimeout %v (0: the default, %v)", mr(nil).CallTimeout, redisstate.DefaultCallTimeout)
	s := startRedis(t)

	// Round trips per call and added latency, one caller, Redis local.
	const n = 20000
	{
		c, k := countedClient(t, s.Addr())
		b := newBudget(t, redisstate.BudgetConfig{Name: "m-rt", Limit: 100, Redis: mr(c)})
		bh, _ := bulkhead.New(bulkhead.Config{Limit: 100})
		defer bh.Close()
		nop := func(context.Context) error { return nil }
		b.Execute(context.Background(), nop) // loads the scripts
		k.n.Store(0)
		var lb, lw []time.Duration
		for range n {
			t0 := time.Now()
			bh.Execute(context.Background(), nop)
			t1 := time.Now()
			if err := b.Execute(context.Background(), nop); err != nil {
				t.Fatal(err)
			}
			t2 := time.Now()
			lb, lw = append(lb, t1.Sub(t0)), append(lw, t2.Sub(t1))
		}
		say("budget: %.2f round trips per call (%d calls); latency p50 %v p99 %v (local bulkhead: p50 %v p99 %v)",
			float64(k.n.Load())/n, n, pct(lw, .5), pct(lw, .99), pct(lb, .5), pct(lb, .99))
	}
	{
		c, k := countedClient(t, s.Addr())
		sb := newShared(t, redisstate.BreakerConfig{Breaker: breaker.Config{Name: "m-rt"}, Redis: mr(c)})
		lb, _ := breaker.New(breaker.Config{})
		defer lb.Close()
		nop := func(context.Context) error { return nil }
		time.Sleep(300 * time.Millisecond)
		k.n.Store(0)
		start := time.Now()
		var ll, ls []time.Duration
		for range 10 * n {
			t0 := time.Now()
			lb.Execute(context.Background(), nop)
			t1 := time.Now()
			sb.Execute(context.Background(), nop)
			t2 := time.Now()
			ll, ls = append(ll, t1.Sub(t0)), append(ls, t2.Sub(t1))
		}
		el := time.Since(start)
		say("shared breaker: %d round trips in %d calls over %v (background polls every %v: %.1f expected); latency p50 %v p99 %v (local breaker: p50 %v p99 %v)",
			k.n.Load(), 10*n, el.Round(time.Millisecond), redisstate.DefaultPollInterval, float64(el)/float64(redisstate.DefaultPollInterval),
			pct(ls, .5), pct(ls, .99), pct(ll, .5), pct(ll, .99))
	}

	// Open propagation, 20 trials each.
	for _, sub := range []bool{true, false} {
		var ds []time.Duration
		for i := range 20 {
			cfg := redisstate.BreakerConfig{Breaker: breaker.Config{Name: fmt.Sprintf("m-prop-%v-%d", sub, i), ConsecutiveFailures: 1, OpenTimeout: time.Minute}, NoSubscribe: !sub}
			a, b := cfg, cfg
			a.Redis, b.Redis = mr(newClient(t, s.Addr())), mr(newClient(t, s.Addr()))
			ra, rb := newShared(t, a), newShared(t, b)
			time.Sleep(50 * time.Millisecond)
			start := time.Now()
			failN(ra, 1)
			for rb.State() != breaker.Open {
				if time.Since(start) > 10*time.Second {
					t.Fatalf("trial %d: the open did not reach the other replica in 10 s", i)
				}
				time.Sleep(100 * time.Microsecond)
			}
			ds = append(ds, time.Since(start))
			ra.Close()
			rb.Close()
		}
		how := "subscription + polling"
		if !sub {
			how = "polling alone (NoSubscribe)"
		}
		say("open propagation, %s, PollInterval %v: p50 %v max %v (20 trials)", how, redisstate.DefaultPollInterval, pct(ds, .5), pct(ds, 1))
	}

	// Outages with the default Redis settings: 3 replicas x 8 callers,
	// calls of 1 ms, limit 12, 1 s up, 2 s away, 1 s back.
	for _, how := range []string{"killed", "frozen"} {
		for _, mode := range []redisstate.Fallback{redisstate.LocalShare, redisstate.FailOpen, redisstate.FailClosed} {
			rs := redistest.Start(t)
			say("outage %s, %v: %s", how, mode, measureOutage(t, rs, how, mode))
		}
	}

	// gobreaker's DistributedCircuitBreaker and ours, same storm: 4
	// replicas x 8 callers for 2 s, calls of 1 ms, healthy dependency.
	type exec func() error
	cmpStorm := func(name string, calls []exec, ks []*counter) {
		var total, failed atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, k := range ks {
			k.n.Store(0)
		}
		start := time.Now()
		for _, call := range calls {
			for range 8 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						if call() == nil {
							total.Add(1)
						} else {
							failed.Add(1)
						}
					}
				})
			}
		}
		time.Sleep(2 * time.Second)
		close(stop)
		wg.Wait()
		el := time.Since(start)
		var rts int64
		for _, k := range ks {
			rts += k.n.Load()
		}
		say("same storm (4 replicas x 8 callers, 1 ms calls), %s: %d calls in %v (%.0f/s), %d failed, %.3f round trips per call",
			name, total.Load(), el.Round(time.Millisecond), float64(total.Load())/el.Seconds(), failed.Load(), float64(rts)/float64(max(total.Load()+failed.Load(), 1)))
	}
	{
		var calls []exec
		var ks []*counter
		for i := range 4 {
			c, k := countedClient(t, s.Addr())
			ks = append(ks, k)
			sb := newShared(t, redisstate.BreakerConfig{Breaker: breaker.Config{Name: "m-cmp"}, Redis: mr(c), Replica: fmt.Sprint(i)})
			calls = append(calls, func() error {
				return sb.Execute(context.Background(), func(context.Context) error { time.Sleep(time.Millisecond); return nil })
			})
		}
		cmpStorm("redisstate.SharedBreaker", calls, ks)
	}
	{
		var calls []exec
		var ks []*counter
		for range 4 {
			c, k := countedClient(t, s.Addr(), func(o *redis.UniversalOptions) { o.ReadTimeout = time.Second; o.WriteTimeout = time.Second })
			ks = append(ks, k)
			dcb, err := gobreaker.NewDistributedCircuitBreaker[struct{}](&gbStore{c: c}, gobreaker.Settings{Name: "m-cmp"})
			if err != nil {
				t.Fatal(err)
			}
			calls = append(calls, func() error {
				_, err := dcb.Execute(func() (struct{}, error) { time.Sleep(time.Millisecond); return struct{}{}, nil })
				return err
			})
		}
		cmpStorm("gobreaker DistributedCircuitBreaker (lock: SET NX PX + compare-and-delete; state: GET/SET)", calls, ks)
	}
	{
		var calls []exec
		var ks []*counter
		for range 4 {
			c, k := countedClient(t, s.Addr())
			ks = append(ks, k)
			b := newBudget(t, redisstate.BudgetConfig{Name: "m-cmp", Limit: 1000, Redis: mr(c)})
			calls = append(calls, func() error {
				return b.Execute(context.Background(), func(context.Context) error { time.Sleep(time.Millisecond); return nil })
			})
		}
		cmpStorm("redisstate.Budget (limit 1000, not reached)", calls, ks)
	}
	measureQuota(t, s.Addr(), say)
	t.Log("\n" + out.String())
}

// gbStore is gobreaker's SharedDataStore on Redis, as its README suggests:
// a lock by SET NX PX with a token, released by a compare-and-delete
// script; the state under a plain key.
type gbStore struct {
	c     redis.UniversalClient
	mu    sync.Mutex
	token map[string]string
	seq   atomic.Int64
}

var gbUnlock = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func (s *gbStore) Lock(name string) error {
	tok := fmt.Sprint(s.seq.Add(1), time.Now().UnixNano())
	ok, err := s.c.SetNX(context.Background(), name, tok, 5*time.Second).Result()
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("locked")
	}
	s.mu.Lock()
	if s.token == nil {
		s.token = map[string]string{}
	}
	s.token[name] = tok
	s.mu.Unlock()
	return nil
}

func (s *gbStore) Unlock(name string) error {
	s.mu.Lock()
	tok := s.token[name]
	s.mu.Unlock()
	return gbUnlock.Run(context.Background(), s.c, []string{name}, tok).Err()
}

func (s *gbStore) GetData(name string) ([]byte, error) {
	b, err := s.c.Get(context.Background(), name).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return b, err
}

func (s *gbStore) SetData(name string, data []byte) error {
	return s.c.Set(context.Background(), name, data, 0).Err()
}

// measureOutage runs the outage storm and describes what the calls saw
// while Redis was away.
func measureOutage(t *testing.T, s *redistest.Server, how string, mode redisstate.Fallback) string {
	const limit, nrep = 12, 3
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	var budgets []*redisstate.Budget
	for range nrep {
		budgets = append(budgets, newBudget(t, redisstate.BudgetConfig{Name: "m-out", Limit: limit, MaxWait: 5 * time.Millisecond,
			Fallback: mode, MeterProvider: mp, Redis: mr(newClient(t, s.Addr()))}))
	}
	// Warm up: each replica loads the scripts and learns the replica count
	// (the local share when Redis is away) before the storm.
	for _, b := range budgets {
		b.Execute(context.Background(), func(context.Context) error { return nil })
	}
	var u upstream
	var phase atomic.Int32 // 0 up, 1 away, 2 back
	var mu sync.Mutex
	var base, away []time.Duration
	var failedRedis, otherErr, calls int64
	var peakAway atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, b := range budgets {
		for range 8 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					ph := phase.Load()
					start := time.Now()
					var adm time.Duration
					err := b.Execute(context.Background(), func(ctx context.Context) error {
						adm = time.Since(start)
						if phase.Load() == 1 {
							n := u.cur.Load() + 1
							for {
								p := peakAway.Load()
								if n <= p || peakAway.CompareAndSwap(p, n) {
									break
								}
							}
						}
						return u.call(ctx, time.Millisecond)
					})
					var re *policy.RejectedError
					mu.Lock()
					calls++
					switch {
					case err == nil:
						if ph == 0 {
							base = append(base, adm)
						} else if ph == 1 && phase.Load() == 1 {
							away = append(away, adm)
						}
					case errors.As(err, &re) && re.Reason == redisstate.ReasonRedisUnavailable:
						if ph == 1 {
							failedRedis++
						}
					case errors.Is(err, policy.ErrRejected):
						time.Sleep(time.Millisecond)
					default:
						otherErr++
					}
					mu.Unlock()
				}
			})
		}
	}
	time.Sleep(time.Second)
	mu.Lock()
	upCalls := calls
	mu.Unlock()
	upFallbacks := fallbacks(t, reader)
	phase.Store(1)
	if how == "killed" {
		s.Kill()
	} else {
		s.Freeze()
	}
	time.Sleep(2 * time.Second)
	if how == "killed" {
		s.Restart()
	} else {
		s.Thaw()
	}
	phase.Store(2)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if otherErr != 0 {
		t.Errorf("%d calls failed with an error of their own", otherErr)
	}
	return fmt.Sprintf("up: %d of %d calls on the fallback (round trips over the deadline); time to admission up p50 %v p99 %v; away p50 %v p99 %v max %v (%d calls admitted); %d rejected for Redis while away; fleet peak while away %d (limit %d); overall peak %d",
		upFallbacks, upCalls, pct(base, .5), pct(base, .99), pct(away, .5), pct(away, .99), pct(away, 1), len(away), failedRedis, peakAway.Load(), limit, u.peak.Load())
}

// measureQuota measures a Quota: its cost, the fleet with and without it,
// and its faults.
func measureQuota(t *testing.T, addr string, say func(string, ...any)) {
	const n = 20000
	trips, _, take, ping := quotaCost(t, addr, n)
	say("quota, far from spent: %.3f round trips per attempt (%d attempts); Limiter.Execute with the Quota p50 %v p99 %v; PING on the same client p50 %v p99 %v",
		float64(trips)/n, n, pct(take, .5), pct(take, .99), pct(ping, .5), pct(ping, .99))
	for _, shared := range []bool{true, false} {
		r := runFleet(t, addr, fmt.Sprint("m-fleet-", shared), shared, 4, 20*time.Second)
		how := map[bool]string{true: "one shared Quota", false: "each replica paced alone to the whole quota"}[shared]
		say("quota fleet, 4 processes x 8 callers, 60 requests and 20 000 tokens a second, 20 s, %s: %d served, %d 429s, %d rejected, %d other; %.1f requests/s and %.0f tokens/s; most in a second %d requests, %d tokens; largest call %d",
			how, r.served, r.n429, r.rejected, r.other, float64(r.served)/r.elapsed.Seconds(), float64(r.tokens)/r.elapsed.Seconds(), r.winReqs, r.winToks, r.biggest)
	}
	_, _, log := quotaFaults(t, mr(nil).CallTimeout)
	say("quota faults: %s", log)
}

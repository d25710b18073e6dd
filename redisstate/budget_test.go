package redisstate_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/redisstate"
)

func newBudget(t testing.TB, cfg redisstate.BudgetConfig) *redisstate.Budget {
	t.Helper()
	b, err := redisstate.NewBudget(cfg)
	if err != nil {
		t.Fatalf("NewBudget: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func leasesKey(name string) string { return "{watertight:budget:" + name + "}:leases" }

func TestBudgetConfigErrors(t *testing.T) {
	c := redisstate.NewClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}})
	defer c.Close()
	raw := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer raw.Close()
	ok := redisstate.BudgetConfig{Name: "x", Limit: 1, Redis: rd(c)}
	for _, tc := range []struct {
		field string
		edit  func(*redisstate.BudgetConfig)
	}{
		{"Config.Name", func(c *redisstate.BudgetConfig) { c.Name = "" }},
		{"Config.Limit", func(c *redisstate.BudgetConfig) { c.Limit = 0 }},
		{"Config.Redis.Client must be set", func(c *redisstate.BudgetConfig) { c.Redis.Client = nil }},
		{"Config.Redis.Client must be set", func(c *redisstate.BudgetConfig) { c.Redis.Client = (*redis.Client)(nil) }},
		{"ContextTimeoutEnabled", func(c *redisstate.BudgetConfig) { c.Redis.Client = raw }},
		{"Config.Redis.CallTimeout", func(c *redisstate.BudgetConfig) { c.Redis.CallTimeout = -1 }},
		{"Config.Redis.RetryAfter", func(c *redisstate.BudgetConfig) { c.Redis.RetryAfter = -1 }},
		{"Config.LeaseTTL", func(c *redisstate.BudgetConfig) { c.LeaseTTL = time.Millisecond }},
		{"Config.MaxWait", func(c *redisstate.BudgetConfig) { c.MaxWait = -1 }},
		{"Config.Fallback", func(c *redisstate.BudgetConfig) { c.Fallback = 7 }},
		{"Config.LocalShare", func(c *redisstate.BudgetConfig) { c.LocalShare = -1 }},
	} {
		cfg := ok
		tc.edit(&cfg)
		b, err := redisstate.NewBudget(cfg)
		if err == nil {
			b.Close()
			t.Errorf("%s: no error", tc.field)
			continue
		}
		if !strings.HasPrefix(err.Error(), "redisstate: ") || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error %q", tc.field, err)
		}
	}
	b, err := redisstate.NewBudget(ok)
	if err != nil {
		t.Fatalf("valid config: %v", err)
	}
	b.Close()
}

// TestBudgetRejects: a full budget rejects with the bulkhead's sentinel and
// the budget's kind; a waiter is admitted when a lease is released; one
// that waits in vain is rejected with wait_timeout.
func TestBudgetRejects(t *testing.T) {
	s := startRedis(t)
	var rejected []string
	var mu sync.Mutex
	cfg := redisstate.BudgetConfig{Name: "rej", Limit: 1, Redis: patientRedis(newClient(t, s.Addr())),
		OnReject: func(_ context.Context, e *policy.RejectedError) {
			mu.Lock()
			rejected = append(rejected, e.Reason)
			mu.Unlock()
		}}
	a := newBudget(t, cfg)
	cfg.Redis.Client = newClient(t, s.Addr())
	b := newBudget(t, cfg)

	hold, release := make(chan struct{}), make(chan struct{})
	go a.Execute(context.Background(), func(context.Context) error { close(hold); <-release; return nil })
	<-hold
	err := b.Execute(context.Background(), func(context.Context) error { t.Error("fn ran on a full budget"); return nil })
	var re *policy.RejectedError
	if !errors.Is(err, bulkhead.ErrFull) || !errors.Is(err, policy.ErrRejected) || !errors.As(err, &re) ||
		re.Kind != redisstate.KindBudget || re.Reason != bulkhead.ReasonFull || re.Name != "rej" {
		t.Fatalf("full budget: %v", err)
	}

	// A waiter is admitted once the lease is released.
	cfg.MaxWait = patience
	cfg.Redis.Client = newClient(t, s.Addr())
	w := newBudget(t, cfg)
	ran := make(chan error, 1)
	go func() { ran <- w.Execute(context.Background(), func(context.Context) error { return nil }) }()
	close(release)
	if err := <-ran; err != nil {
		t.Fatalf("waiter: %v", err)
	}

	// One that waits in vain.
	cfg.MaxWait = 30 * time.Millisecond
	cfg.Redis.Client = newClient(t, s.Addr())
	w2 := newBudget(t, cfg)
	hold2, release2 := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		a.Execute(context.Background(), func(context.Context) error { close(hold2); <-release2; return nil })
		close(done)
	}()
	<-hold2
	err = w2.Execute(context.Background(), func(context.Context) error { return nil })
	if !errors.As(err, &re) || re.Reason != bulkhead.ReasonWaitTimeout || !errors.Is(err, bulkhead.ErrFull) {
		t.Fatalf("wait in vain: %v", err)
	}
	// A canceled waiter returns ctx.Err() and leaves nothing behind.
	ctx, cancel := context.WithCancel(context.Background())
	cfg.MaxWait = time.Minute
	w3 := newBudget(t, cfg)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if err := w3.Execute(ctx, func(context.Context) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled waiter: %v", err)
	}
	close(release2)
	<-done
	if n := zcard(t, cfg.Redis.Client, leasesKey("rej")); n != 0 {
		t.Fatalf("%d leases left", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(rejected, ",") != "full,wait_timeout" {
		t.Fatalf("OnReject saw %v", rejected)
	}
}

// TestBudgetLocalFirst: the local bulkhead is consulted first, so a replica
// never runs more than its local limit, and a call the local bulkhead
// rejects takes no lease.
func TestBudgetLocalFirst(t *testing.T) {
	s := startRedis(t)
	local, err := bulkhead.New(bulkhead.Config{Name: "local", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	c := newClient(t, s.Addr())
	b := newBudget(t, redisstate.BudgetConfig{Name: "lf", Limit: 10, Local: local, Redis: patientRedis(c)})
	var u upstream
	var wg sync.WaitGroup
	var localRej, budgetRej int64
	var mu sync.Mutex
	for range 20 {
		wg.Go(func() {
			for range 20 {
				err := b.Execute(context.Background(), func(ctx context.Context) error { return u.call(ctx, time.Millisecond) })
				var re *policy.RejectedError
				if errors.As(err, &re) {
					mu.Lock()
					if re.Kind == bulkhead.Kind {
						localRej++
					} else {
						budgetRej++
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if p := u.peak.Load(); p > 2 {
		t.Fatalf("peak %d over the local limit 2", p)
	}
	if localRej == 0 || budgetRej != 0 {
		t.Fatalf("rejections: local %d, budget %d", localRej, budgetRej)
	}
	if n := zcard(t, c, leasesKey("lf")); n != 0 || local.Active() != 0 || b.InFlight() != 0 {
		t.Fatalf("left: %d leases, %d local, %d in flight", n, local.Active(), b.InFlight())
	}
}

// storm runs calls from every budget, each from several goroutines, with
// random cancels and panics, for at least minDur and until it has pressed
// the limit (the upstream saw press calls at once and some call was
// rejected), or for patience at most; it returns how many calls were
// admitted and rejected. Its length is thus set by events, not by the
// clock alone: on a loaded machine the goroutines may get little of
// minDur.
func storm(t testing.TB, budgets []*redisstate.Budget, perReplica int, u *upstream, minDur time.Duration, press int64) (admitted, rejected int64) {
	var wg sync.WaitGroup
	var adm, rej atomic.Int64
	stop := make(chan struct{})
	for _, b := range budgets {
		for range perReplica {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithCancel(context.Background())
					roll := rand.IntN(20)
					if roll == 0 {
						go func() { time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond); cancel() }()
					}
					func() {
						defer func() {
							if p := recover(); p != nil && p != "storm panic" {
								panic(p)
							}
						}()
						err := b.Execute(ctx, func(ctx context.Context) error {
							adm.Add(1)
							if roll == 1 {
								panic("storm panic")
							}
							return u.call(ctx, time.Duration(rand.IntN(2000))*time.Microsecond)
						})
						if errors.Is(err, policy.ErrRejected) {
							rej.Add(1)
						}
					}()
					cancel()
				}
			})
		}
	}
	start := time.Now()
	time.Sleep(minDur)
	for (u.peak.Load() < press || rej.Load() == 0) && time.Since(start) < patience {
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	return adm.Load(), rej.Load()
}

// TestBudgetStorm: four replicas, each with its own client, storm one
// budget with random cancels and panics: the fake upstream never sees more
// than Limit calls at once, and every lease is given back.
func TestBudgetStorm(t *testing.T) {
	s := startRedis(t)
	const limit = 6
	var budgets []*redisstate.Budget
	for range 4 {
		budgets = append(budgets, newBudget(t, redisstate.BudgetConfig{
			Name: "storm", Limit: limit, MaxWait: 20 * time.Millisecond, Fallback: redisstate.FailClosed,
			// A lease that is not given back stays for the whole test (it
			// cannot lapse before the check below gives up), and round
			// trips have a deadline a loaded machine does not reach: a
			// release that timed out would leave its lease to lapse, as
			// designed, and fail the test for want of an answer.
			LeaseTTL: 10 * time.Minute,
			Redis:    patientRedis(newClient(t, s.Addr())),
		}))
	}
	var u upstream
	d := 2 * time.Second
	if testing.Short() {
		d = 500 * time.Millisecond
	}
	admitted, rejected := storm(t, budgets, 8, &u, d, limit/2)
	t.Logf("admitted %d, rejected %d, peak %d at the upstream", admitted, rejected, u.peak.Load())
	if p := u.peak.Load(); p > limit {
		t.Fatalf("peak %d over the global limit %d", p, limit)
	}
	if u.peak.Load() < limit/2 || rejected == 0 {
		t.Fatalf("the storm did not press the limit in %v: peak %d, %d rejected", patience, u.peak.Load(), rejected)
	}
	// Given back, not lapsed (LeaseTTL is 10 minutes): an acquire that got
	// no answer in time leaves a lease that the next release, or Close,
	// removes.
	c := newClient(t, s.Addr())
	for _, b := range budgets {
		b.Close()
	}
	eventually(t, patience, "every lease given back", func() bool { return zcard(t, c, leasesKey("storm")) == 0 })
	for _, b := range budgets {
		if b.InFlight() != 0 {
			t.Fatalf("replica %s: %d in flight after the storm", b.Replica(), b.InFlight())
		}
	}
}

// TestBudgetRenewsLongCall: a call longer than LeaseTTL keeps its lease,
// so another replica stays rejected throughout; once it ends, the lease is
// free at once. The renewals are seen in Redis (the lease's expiry moves
// on), so the test waits for renewals, not for a time: LeaseTTL is long
// enough (a renewal due every 667 ms, the lease lost if it comes 1.3 s
// late) for a loaded machine to renew in time.
func TestBudgetRenewsLongCall(t *testing.T) {
	s := startRedis(t)
	cfg := redisstate.BudgetConfig{Name: "long", Limit: 1, LeaseTTL: 2 * time.Second,
		Redis: patientRedis(newClient(t, s.Addr()))}
	a := newBudget(t, cfg)
	cfg.Redis.Client = newClient(t, s.Addr())
	b := newBudget(t, cfg)
	c := newClient(t, s.Addr())
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		a.Execute(context.Background(), func(context.Context) error { close(started); <-release; return nil })
		close(done)
	}()
	<-started
	expiry := func() float64 {
		z, err := c.ZRangeWithScores(context.Background(), leasesKey("long"), 0, -1).Result()
		if err != nil || len(z) != 1 {
			t.Fatalf("leases: %v, %v; want the one lease", z, err)
		}
		return z[0].Score
	}
	const renewals = 3 // the lease outlives LeaseTTL: more than LeaseTTL/(LeaseTTL/3)
	last, seen := expiry(), 0
	for start := time.Now(); seen < renewals; time.Sleep(10 * time.Millisecond) {
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("a second call was admitted while a renewed lease was held (%d renewals seen): %v", seen, err)
		}
		if e := expiry(); e > last {
			last, seen = e, seen+1
		}
		if time.Since(start) > patience {
			t.Fatalf("%d renewals of the lease in %v, want %d", seen, patience, renewals)
		}
	}
	close(release)
	<-done
	if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

// TestBudgetFallbackModes: with Redis killed, LocalShare admits up to the
// share and rejects the rest as full, FailOpen admits, FailClosed rejects
// with redis_unavailable; each fallback is counted. With Redis back, the
// budget takes leases again without a restart.
func TestBudgetFallbackModes(t *testing.T) {
	s := startRedis(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	mk := func(mode redisstate.Fallback) *redisstate.Budget {
		return newBudget(t, redisstate.BudgetConfig{Name: "fb-" + mode.String(), Limit: 4, Fallback: mode, LocalShare: 2,
			MeterProvider: mp, Redis: rd(newClient(t, s.Addr()))})
	}
	share, open, closed := mk(redisstate.LocalShare), mk(redisstate.FailOpen), mk(redisstate.FailClosed)
	nop := func(context.Context) error { return nil }
	for _, b := range []*redisstate.Budget{share, open, closed} {
		if err := b.Execute(context.Background(), nop); err != nil {
			t.Fatalf("%v with Redis up: %v", b, err)
		}
	}
	s.Kill()

	// LocalShare: two held, the third is full.
	hold, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := share.Execute(context.Background(), func(context.Context) error { hold <- struct{}{}; <-release; return nil }); err != nil {
				t.Errorf("local share: %v", err)
				hold <- struct{}{}
			}
		})
	}
	<-hold
	<-hold
	var re *policy.RejectedError
	if err := share.Execute(context.Background(), nop); !errors.As(err, &re) || re.Reason != bulkhead.ReasonFull {
		t.Fatalf("over the local share: %v", err)
	}
	close(release)
	wg.Wait()
	for range 10 {
		if err := open.Execute(context.Background(), nop); err != nil {
			t.Fatalf("fail-open: %v", err)
		}
		if err := closed.Execute(context.Background(), nop); !errors.As(err, &re) || re.Reason != redisstate.ReasonRedisUnavailable || !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("fail-closed: %v", err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != redisstate.MetricFallbacks {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				mode, _ := dp.Attributes.Value(attribute.Key(redisstate.KeyMode))
				got[mode.AsString()] += dp.Value
			}
		}
	}
	if got["local_share"] != 3 || got["fail_open"] != 10 || got["fail_closed"] != 10 {
		t.Fatalf("fallbacks counted: %v", got)
	}

	// Redis back: leases again, once the local breaker on Redis retries.
	s.Restart()
	eventually(t, patience, "the budget takes leases again", func() bool {
		c := newClient(t, s.Addr())
		held := make(chan int64, 1)
		closed.Execute(context.Background(), func(context.Context) error {
			held <- zcard(t, c, leasesKey("fb-fail_closed"))
			return nil
		})
		select {
		case n := <-held:
			return n == 1
		default:
			return false
		}
	})
}

// shareOf returns how many calls b admits at once with Redis away: its
// LocalShare, held until one is rejected.
func shareOf(t *testing.T, b *redisstate.Budget, limit int) int {
	t.Helper()
	release := make(chan struct{})
	defer close(release)
	for n := range limit + 1 {
		entered := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- b.Execute(context.Background(), func(context.Context) error { close(entered); <-release; return nil })
		}()
		select {
		case <-entered:
		case err := <-done:
			var re *policy.RejectedError
			if !errors.As(err, &re) || re.Reason != bulkhead.ReasonFull {
				t.Fatalf("call %d over the share: %v", n+1, err)
			}
			return n
		}
	}
	return limit + 1
}

// A count taken while Redis counts afresh only raises the count a replica
// keeps, as the LocalShare doc says, so a replica whose every answer came
// before the others were counted keeps a count of 1: three replicas call
// once each in turn at start-up, Redis restarts empty, each calls once
// more, Redis dies. The first keeps 1 (the whole Limit), the second 2, the
// third 3: 9 + 5 + 3 for a Limit of 9.
func TestBudgetShareAfterAnEmptyRestartAtStartUp(t *testing.T) {
	s := startRedis(t)
	const limit = 9
	var bs []*redisstate.Budget
	for range 3 {
		bs = append(bs, newBudget(t, redisstate.BudgetConfig{Name: "startup", Limit: limit, Redis: rd(newClient(t, s.Addr()))}))
	}
	nop := func(context.Context) error { return nil }
	callEach := func() {
		for i, b := range bs {
			if err := b.Execute(context.Background(), nop); err != nil {
				t.Fatalf("replica %d: %v", i, err)
			}
		}
	}
	callEach()
	s.Kill()
	s.Restart()
	c := newClient(t, s.Addr())
	eventually(t, patience, "Redis answers again", func() bool { return c.Ping(context.Background()).Err() == nil })
	callEach()
	s.Kill()
	var got []int
	for _, b := range bs {
		got = append(got, shareOf(t, b, limit))
	}
	if want := []int{9, 5, 3}; !slices.Equal(got, want) {
		t.Errorf("shares %v; want %v", got, want)
	}
}

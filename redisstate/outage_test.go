package redisstate_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/redisstate"
	"github.com/watertight/watertight/redisstate/internal/redistest"
)

// outageStats is what an outage storm saw.
type outageStats struct {
	mu          sync.Mutex
	admitted    int64
	full        int64 // rejected for capacity (full, wait_timeout)
	unavailable int64 // rejected because of Redis
	otherErr    int64 // any other error: a failure because of Redis
	during      int64 // admitted while Redis was away
	ended       int64 // calls ended, however
	lat         []time.Duration
}

// budgetOutage storms budgets from several goroutines each while outage
// runs (it takes Redis away and back, and returns when done), then checks
// that nothing hung and the upstream never saw more than max at once.
// outage marks each of its phases with phase(d): at least d, and until
// calls have ended in it (and, while Redis is away and the fallback
// admits, until some call has been admitted), so that a loaded machine
// that runs the storm's goroutines late only makes a phase longer.
func budgetOutage(t *testing.T, s *redistest.Server, mode redisstate.Fallback, outage func(away *atomic.Bool, phase func(d time.Duration))) *outageStats {
	const limit, nrep, share = 6, 3, 2
	var budgets []*redisstate.Budget
	for range nrep {
		budgets = append(budgets, newBudget(t, redisstate.BudgetConfig{
			Name: "outage", Limit: limit, MaxWait: 10 * time.Millisecond, LeaseTTL: time.Second,
			Fallback: mode, LocalShare: share,
			// A round trip gives up on a frozen Redis, soon, but not so soon
			// that a loaded machine's round trips to a live one do.
			Redis: redisstate.Redis{Client: newClient(t, s.Addr()), CallTimeout: 200 * time.Millisecond, RetryAfter: 100 * time.Millisecond},
		}))
	}
	var u upstream
	var away atomic.Bool
	var st outageStats
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, b := range budgets {
		for range 6 {
			wg.Go(func() {
				var lat []time.Duration
				defer func() { st.mu.Lock(); st.lat = append(st.lat, lat...); st.mu.Unlock() }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					wasAway := away.Load()
					start := time.Now()
					var ran time.Duration
					err := b.Execute(context.Background(), func(ctx context.Context) error {
						ran = time.Since(start)
						return u.call(ctx, time.Duration(rand.IntN(3000))*time.Microsecond)
					})
					st.mu.Lock()
					st.ended++
					var re *policy.RejectedError
					switch {
					case err == nil:
						st.admitted++
						if wasAway && away.Load() {
							st.during++
						}
						lat = append(lat, ran)
					case errors.As(err, &re) && re.Reason == redisstate.ReasonRedisUnavailable:
						st.unavailable++
					case errors.Is(err, bulkhead.ErrFull):
						st.full++
						time.Sleep(time.Millisecond)
					default:
						st.otherErr++
					}
					st.mu.Unlock()
				}
			})
		}
	}
	phase := func(d time.Duration) {
		st.mu.Lock()
		ended, during := st.ended, st.during
		st.mu.Unlock()
		time.Sleep(d)
		eventually(t, patience, "calls ended in this phase of the outage", func() bool {
			st.mu.Lock()
			defer st.mu.Unlock()
			return st.ended >= ended+20
		})
		if away.Load() && mode != redisstate.FailClosed {
			eventually(t, patience, "a call admitted while Redis is away", func() bool {
				st.mu.Lock()
				defer st.mu.Unlock()
				return st.during > during
			})
		}
	}
	outage(&away, phase)
	close(stop)
	wg.Wait()
	// (FailClosed on a loaded machine may admit none: its round trips
	// then time out, and it rejects.)
	st.lat = append(st.lat, 0)
	sort.Slice(st.lat, func(i, j int) bool { return st.lat[i] < st.lat[j] })
	p := func(q float64) time.Duration { return st.lat[int(q*float64(len(st.lat)-1))] }
	t.Logf("%v: admitted %d (%d while Redis was away), full %d, redis_unavailable %d, other errors %d; upstream peak %d; time to admission p50 %v p99 %v max %v",
		mode, st.admitted, st.during, st.full, st.unavailable, st.otherErr, u.peak.Load(), p(0.5), p(0.99), st.lat[len(st.lat)-1])
	if st.otherErr != 0 {
		t.Fatalf("%d calls failed with an error of their own", st.otherErr)
	}
	// The local shares add up to the limit, but at the edges of the outage
	// the calls admitted one way still run while the others are admitted
	// the other way (leases held when Redis went away count in a replica's
	// share, not in the others'): the fleet can then reach the limit plus
	// the sum of the shares. A restarted Redis has forgotten every lease,
	// but the calls here are far shorter than the outage, so none that
	// held a lost lease still runs when Redis is back (see
	// TestBudgetFailoverBound for those).
	if mode == redisstate.LocalShare && u.peak.Load() > limit+nrep*share {
		t.Fatalf("local share: upstream peak %d over the limit %d plus the shares %d x %d", u.peak.Load(), limit, nrep, share)
	}
	if mode != redisstate.FailClosed && (st.during == 0 || st.unavailable != 0) {
		t.Fatalf("%v: %d calls admitted while Redis was away, %d rejected for it", mode, st.during, st.unavailable)
	}
	// Converged: leases are taken again, and all given back.
	c := newClient(t, s.Addr())
	eventually(t, patience, "leases taken again after the outage", func() bool {
		seen := int64(-1)
		budgets[0].Execute(context.Background(), func(context.Context) error { seen = zcard(t, c, leasesKey("outage")); return nil })
		return seen >= 1
	})
	eventually(t, patience, "every lease given back", func() bool { return zcard(t, c, leasesKey("outage")) == 0 })
	for _, b := range budgets {
		if b.InFlight() != 0 {
			t.Fatalf("%d in flight after the storm", b.InFlight())
		}
	}
	return &st
}

// TestBudgetRedisKilledMidStorm: Redis killed (connections refused) in the
// middle of a storm, then restarted empty: calls keep flowing under each
// fallback, nothing hangs or leaks, and leases are taken again after.
func TestBudgetRedisKilledMidStorm(t *testing.T) {
	for _, mode := range []redisstate.Fallback{redisstate.LocalShare, redisstate.FailOpen, redisstate.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			s := startRedis(t)
			budgetOutage(t, s, mode, func(away *atomic.Bool, phase func(time.Duration)) {
				phase(300 * time.Millisecond)
				s.Kill()
				away.Store(true)
				phase(500 * time.Millisecond)
				away.Store(false)
				s.Restart()
				phase(500 * time.Millisecond)
			})
		})
	}
}

// TestBudgetRedisFrozenMidStorm: Redis stopped with SIGSTOP (the hang of a
// dead host: connections open, nothing answers) in the middle of a storm,
// then resumed: calls keep flowing, and the leases a frozen Redis took for
// acquires that had timed out are removed by later releases.
func TestBudgetRedisFrozenMidStorm(t *testing.T) {
	for _, mode := range []redisstate.Fallback{redisstate.LocalShare, redisstate.FailOpen, redisstate.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			s := startRedis(t)
			budgetOutage(t, s, mode, func(away *atomic.Bool, phase func(time.Duration)) {
				phase(300 * time.Millisecond)
				s.Freeze()
				away.Store(true)
				phase(500 * time.Millisecond)
				away.Store(false)
				s.Thaw()
				phase(500 * time.Millisecond)
			})
		})
	}
}

// TestSharedBreakerOutage: with Redis killed, then frozen, replicas run on
// their local breakers (a trip opens only the tripping replica, calls on
// the others keep flowing), and once Redis is back a trip opens every
// replica again, without a restart.
func TestSharedBreakerOutage(t *testing.T) {
	for _, how := range []string{"killed", "frozen"} {
		t.Run(how, func(t *testing.T) {
			s := startRedis(t)
			rs := replicas(t, 3, s.Addr(), redisstate.BreakerConfig{
				Breaker:      breaker.Config{Name: "outage", ConsecutiveFailures: 2, OpenTimeout: 200 * time.Millisecond},
				PollInterval: 20 * time.Millisecond,
				Redis:        redisstate.Redis{CallTimeout: time.Second}, // Redis frozen: a round trip gives up
			})
			for _, r := range rs {
				r.Execute(context.Background(), func(context.Context) error { return nil })
			}
			if how == "killed" {
				s.Kill()
			} else {
				s.Freeze()
			}
			time.Sleep(100 * time.Millisecond) // the polls notice
			failN(rs[0], 2)
			if rs[0].State() != breaker.Open {
				t.Fatalf("tripping replica: %v", rs[0].State())
			}
			var worst time.Duration
			for range 200 {
				for _, r := range rs[1:] {
					start := time.Now()
					if err := r.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
						t.Fatalf("replica without Redis: %v", err)
					}
					worst = max(worst, time.Since(start))
				}
			}
			t.Logf("Redis %s: slowest of 400 calls on the other replicas %v", how, worst)
			// The tripping replica probes for itself and closes.
			eventually(t, patience, "the tripped replica closes on its own probe", func() bool {
				rs[0].Execute(context.Background(), func(context.Context) error { return nil })
				return rs[0].State() == breaker.Closed
			})
			if how == "killed" {
				s.Restart()
			} else {
				s.Thaw()
			}
			// Wait until each replica's guard lets it reach Redis again
			// and whatever the frozen Redis ran on waking has settled.
			time.Sleep(1500 * time.Millisecond)
			for _, r := range rs {
				eventually(t, patience, "closed after the outage", func() bool {
					r.Execute(context.Background(), func(context.Context) error { return nil })
					return r.State() == breaker.Closed
				})
			}
			// rs[1]'s trip reaches the others only through Redis: if its
			// round trip to Redis failed (a loaded machine), it opened
			// rs[1] alone; it trips again once rs[1] has closed.
			eventually(t, patience, "a trip after the outage opens every replica", func() bool {
				if rs[1].State() == breaker.Closed {
					failN(rs[1], 2)
				}
				return rs[0].State() != breaker.Closed && rs[2].State() != breaker.Closed
			})
		})
	}
}

// stormCall makes one call of TestSharedBreakerStormConverges's storm
// through r, canceled before it starts or panicking one time in thirty
// each, to a dependency that fails while sick. It reports whether the
// call ended as it may: fn's own error, a rejection, or the cancel.
func stormCall(r *redisstate.SharedBreaker, sick *atomic.Bool) (ok bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	roll := rand.IntN(30)
	if roll == 0 {
		cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			if p != "storm panic" {
				panic(p)
			}
			ok = true
		}
	}()
	err := r.Execute(ctx, func(ctx context.Context) error {
		if roll == 1 {
			panic("storm panic")
		}
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
		if sick.Load() {
			return errBoom
		}
		return ctx.Err()
	})
	if errors.Is(err, breaker.ErrOpen) {
		time.Sleep(time.Millisecond)
	}
	return err == nil || err == errBoom || errors.Is(err, breaker.ErrOpen) || errors.Is(err, context.Canceled)
}

// TestSharedBreakerStormConverges: four replicas storm a flapping
// dependency with random panics and cancels while Redis is frozen, thawed,
// killed and restarted; no call hangs or fails with an error of the
// breaker's own making, and once the dependency is healthy every replica
// closes, and a trip still opens them all.
func TestSharedBreakerStormConverges(t *testing.T) {
	s := startRedis(t)
	rs := make([]*redisstate.SharedBreaker, 4)
	for i := range rs {
		// A round trip is soon given up on a frozen Redis, not on a
		// loaded machine's.
		rs[i] = newShared(t, redisstate.BreakerConfig{
			Breaker:      breaker.Config{Name: "converge", ConsecutiveFailures: 3, OpenTimeout: 100 * time.Millisecond},
			Redis:        redisstate.Redis{Client: newClient(t, s.Addr()), CallTimeout: 200 * time.Millisecond, RetryAfter: 200 * time.Millisecond},
			PollInterval: 20 * time.Millisecond,
		})
	}
	var sick atomic.Bool
	var calls, bad atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, r := range rs {
		for range 6 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					calls.Add(1)
					if !stormCall(r, &sick) {
						bad.Add(1)
					}
				}
			})
		}
	}
	flap := time.NewTicker(150 * time.Millisecond)
	for i := range 16 {
		<-flap.C
		sick.Store(i%2 == 0)
		switch i {
		case 3:
			s.Freeze()
		case 6:
			s.Thaw()
		case 8:
			s.Kill()
		case 11:
			s.Restart()
		}
	}
	flap.Stop()
	sick.Store(false)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d calls", calls.Load())
	if bad.Load() != 0 {
		t.Fatalf("%d calls failed with an error of the breaker's own making", bad.Load())
	}
	c := newClient(t, s.Addr())
	for i, r := range rs {
		deadline := time.Now().Add(patience)
		for {
			err := r.Execute(context.Background(), func(context.Context) error { return nil })
			if r.State() == breaker.Closed {
				break
			}
			if time.Now().After(deadline) {
				st, _ := c.HGetAll(context.Background(), "{watertight:breaker:converge}:state").Result()
				probe, _ := c.Get(context.Background(), "{watertight:breaker:converge}:probe").Result()
				var states []string
				for _, r := range rs {
					states = append(states, r.Replica()+" "+r.State().String())
				}
				t.Fatalf("replica %d not closed in %v (last call: %v); replicas %v; Redis state %v, probe lease %q", i, patience, err, states, st, probe)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// As in TestSharedBreakerOutage: tripped again should its trip not
	// reach Redis; the others open only by the shared state.
	eventually(t, patience, "a trip after the storm opens every replica", func() bool {
		if rs[3].State() == breaker.Closed {
			failN(rs[3], 3)
		}
		for _, r := range rs[:3] {
			if r.State() == breaker.Closed {
				return false
			}
		}
		return true
	})
}

// TestSharedBreakerFollowsStateAfterFreeze: a well-formed open published on
// the breaker's channel holds every replica open (for their OpenTimeout,
// an hour: longer than the test waits), then Redis freezes until every
// replica's round trips have failed. Once Redis answers again, the
// replicas follow the shared state, which is closed: they close, as
// nothing else in the test could make them.
func TestSharedBreakerFollowsStateAfterFreeze(t *testing.T) {
	s := startRedis(t)
	const channel = "{watertight:breaker:follow}:events"
	var rs []*redisstate.SharedBreaker
	var readers []*sdkmetric.ManualReader
	for range 3 {
		mp, reader := meter(t)
		readers = append(readers, reader)
		rs = append(rs, newShared(t, redisstate.BreakerConfig{
			Breaker: breaker.Config{Name: "follow", OpenTimeout: time.Hour, MeterProvider: mp},
			// A round trip gives up on the frozen Redis, not on a loaded
			// machine's.
			Redis:        redisstate.Redis{Client: newClient(t, s.Addr()), CallTimeout: 100 * time.Millisecond, RetryAfter: 100 * time.Millisecond},
			PollInterval: 50 * time.Millisecond,
		}))
	}
	pub := newClient(t, s.Addr())
	eventually(t, patience, "every replica subscribed", func() bool { return numsub(t, pub, channel) == 3 })
	all := func(st breaker.State) bool {
		for _, r := range rs {
			if r.State() != st {
				return false
			}
		}
		return true
	}
	// A poll between the message and the freeze finds the shared state
	// closed and closes its replica: then thaw, and again.
	for {
		base := make([]int64, len(readers))
		for i, r := range readers {
			base[i] = fallbacks(t, r)
		}
		if err := pub.Publish(context.Background(), channel, "open 1 3600000").Err(); err != nil {
			t.Fatal(err)
		}
		s.Freeze()
		time.Sleep(300 * time.Millisecond)
		eventually(t, patience, "every replica's round trips fail", func() bool {
			for i, r := range readers {
				if fallbacks(t, r) == base[i] {
					return false
				}
			}
			return true
		})
		if all(breaker.Open) {
			break
		}
		s.Thaw()
	}
	s.Thaw()
	thawed := time.Now()
	eventually(t, patience, "every replica follows the closed shared state", func() bool { return all(breaker.Closed) })
	t.Logf("every replica closed %v after Redis was thawed", time.Since(thawed))
}

package redisstate_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/redisstate"
)

func newShared(t testing.TB, cfg redisstate.BreakerConfig) *redisstate.SharedBreaker {
	t.Helper()
	s, err := redisstate.NewSharedBreaker(cfg)
	if err != nil {
		t.Fatalf("NewSharedBreaker: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// replicas builds n shared breakers named name on addr, each with its own
// client, from cfg. Their Redis settings are patientRedis's unless
// cfg.Redis sets a CallTimeout: a replica whose round trips time out on a
// loaded machine falls back to its local breaker, which is what the
// outage tests are about and the others must not see.
func replicas(t testing.TB, n int, addr string, cfg redisstate.BreakerConfig) []*redisstate.SharedBreaker {
	var out []*redisstate.SharedBreaker
	for range n {
		c := cfg
		if cfg.Redis.CallTimeout == 0 {
			c.Redis = patientRedis(newClient(t, addr))
		} else {
			c.Redis.Client = newClient(t, addr)
		}
		out = append(out, newShared(t, c))
	}
	return out
}

func failN(s *redisstate.SharedBreaker, n int) {
	for range n {
		s.Execute(context.Background(), func(context.Context) error { return errBoom })
	}
}

func TestSharedBreakerConfigErrors(t *testing.T) {
	c := redisstate.NewClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}})
	defer c.Close()
	ok := redisstate.BreakerConfig{Breaker: breaker.Config{Name: "x"}, Redis: rd(c)}
	for _, tc := range []struct {
		field string
		edit  func(*redisstate.BreakerConfig)
	}{
		{"Config.Breaker.Name", func(c *redisstate.BreakerConfig) { c.Breaker.Name = "" }},
		{"Config.Breaker.OpenTimeout", func(c *redisstate.BreakerConfig) { c.Breaker.OpenTimeout = -1 }},
		{"Config.Quorum", func(c *redisstate.BreakerConfig) { c.Quorum = -1 }},
		{"Config.Window", func(c *redisstate.BreakerConfig) { c.Window = time.Microsecond }},
		{"Config.PollInterval", func(c *redisstate.BreakerConfig) { c.PollInterval = time.Microsecond }},
		{"Config.ProbeLease", func(c *redisstate.BreakerConfig) { c.ProbeLease = time.Millisecond }},
		{"Config.Redis.Client", func(c *redisstate.BreakerConfig) { c.Redis.Client = nil }},
	} {
		cfg := ok
		tc.edit(&cfg)
		s, err := redisstate.NewSharedBreaker(cfg)
		if err == nil {
			s.Close()
			t.Errorf("%s: no error", tc.field)
			continue
		}
		if !strings.HasPrefix(err.Error(), "redisstate: ") || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error %q", tc.field, err)
		}
	}
}

// TestSharedOpenPropagates: one replica's failures open the breaker on the
// others, by subscription; no replica talks to Redis on a call.
func TestSharedOpenPropagates(t *testing.T) {
	for _, tc := range []struct {
		name string
		sub  bool
	}{{"subscription", true}, {"polling", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := startRedis(t)
			rs := replicas(t, 3, s.Addr(), redisstate.BreakerConfig{
				Breaker:      breaker.Config{Name: "prop", ConsecutiveFailures: 3, OpenTimeout: 10 * time.Second},
				NoSubscribe:  !tc.sub,
				PollInterval: 50 * time.Millisecond,
			})
			failN(rs[0], 3)
			if st := rs[0].State(); st != breaker.Open {
				t.Fatalf("tripping replica: %v", st)
			}
			start := time.Now()
			eventually(t, patience, "the others open", func() bool {
				return rs[1].State() == breaker.Open && rs[2].State() == breaker.Open
			})
			t.Logf("open reached both other replicas in %v", time.Since(start))
			var re *policy.RejectedError
			err := rs[2].Execute(context.Background(), func(context.Context) error { t.Error("fn ran"); return nil })
			if !errors.As(err, &re) || re.Reason != breaker.ReasonOpen {
				t.Fatalf("other replica: %v", err)
			}
		})
	}
}

// TestSharedSlowRulePropagates: the local breaker's slow rule trips one
// replica while its calls still run, and the open reaches the others as
// any trip does.
func TestSharedSlowRulePropagates(t *testing.T) {
	s := startRedis(t)
	rs := replicas(t, 2, s.Addr(), redisstate.BreakerConfig{
		Breaker: breaker.Config{Name: "slow", ConsecutiveFailures: 1000, OpenTimeout: 10 * time.Second,
			SlowCallRatio: 1, SlowCallDuration: 50 * time.Millisecond, SlowCallMinCalls: 2},
		PollInterval: 50 * time.Millisecond,
	})
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			rs[0].Execute(context.Background(), func(context.Context) error { <-release; return nil })
		})
	}
	defer func() { close(release); wg.Wait() }()
	eventually(t, patience, "the slow replica opens while its calls run", func() bool { return rs[0].State() == breaker.Open })
	eventually(t, patience, "the other replica opens", func() bool { return rs[1].State() == breaker.Open })
}

// TestSharedQuorum: with Quorum 2, one replica's trip opens only itself;
// a second replica's trip opens every replica.
func TestSharedQuorum(t *testing.T) {
	s := startRedis(t)
	rs := replicas(t, 3, s.Addr(), redisstate.BreakerConfig{
		Breaker: breaker.Config{Name: "quorum", ConsecutiveFailures: 2, OpenTimeout: 10 * time.Second},
		Quorum:  2, PollInterval: 20 * time.Millisecond,
	})
	failN(rs[0], 2)
	time.Sleep(150 * time.Millisecond) // several polls and a report: nothing may open
	if rs[1].State() != breaker.Closed || rs[2].State() != breaker.Closed {
		t.Fatalf("one trip of a quorum of 2 opened others: %v %v", rs[1].State(), rs[2].State())
	}
	failN(rs[1], 2)
	eventually(t, patience, "the third replica opens", func() bool { return rs[2].State() == breaker.Open })
}

// probeCounter is an upstream that counts the calls reaching it at once
// and fails while sick.
type probeCounter struct {
	upstream
	sick atomic.Bool
}

func (p *probeCounter) call(ctx context.Context) error {
	if err := p.upstream.call(ctx, 20*time.Millisecond); err != nil {
		return err
	}
	if p.sick.Load() {
		return errBoom
	}
	return nil
}

// TestSharedOneProber: while the breaker is open everywhere, replicas
// storming it send one probe at a time (the holder of the probe lease);
// failed probes reopen it everywhere, and once the upstream heals the
// prober's verdict closes every replica. The sick phase lasts at least a
// second and until several probes have failed (events, not a rate, so a
// starved machine only makes it longer); the probes are then bounded by
// the open periods that fit in the time measured: a failed probe opens a
// new period of OpenTimeout, so two probes are at least OpenTimeout
// apart, whatever the load.
func TestSharedOneProber(t *testing.T) {
	s := startRedis(t)
	const openTimeout = 150 * time.Millisecond
	rs := replicas(t, 4, s.Addr(), redisstate.BreakerConfig{
		Breaker:      breaker.Config{Name: "probe", ConsecutiveFailures: 3, OpenTimeout: openTimeout},
		PollInterval: 10 * time.Millisecond,
	})
	var up probeCounter
	up.sick.Store(true)
	failN(rs[0], 3)
	eventually(t, patience, "all open", func() bool {
		for _, r := range rs {
			if r.State() != breaker.Open {
				return false
			}
		}
		return true
	})
	up.peak.Store(0)
	up.total.Store(0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now() // before any probe of the storm can begin
	for _, r := range rs {
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := r.Execute(context.Background(), up.call); errors.Is(err, policy.ErrRejected) {
						time.Sleep(time.Millisecond)
					}
				}
			})
		}
	}
	const minProbes = 3
	time.Sleep(time.Second)
	eventually(t, patience, fmt.Sprintf("%d failed probes", minProbes), func() bool { return up.total.Load() >= minProbes })
	sickProbes, sickPeak := up.total.Load(), up.peak.Load()
	sickFor := time.Since(start) // after the last probe counted began
	up.sick.Store(false)
	eventually(t, patience, "all closed after a good probe", func() bool {
		for _, r := range rs {
			if r.State() != breaker.Closed {
				return false
			}
		}
		return true
	})
	close(stop)
	wg.Wait()
	t.Logf("while sick: %d probes in %v, at most %d at once", sickProbes, sickFor, sickPeak)
	if sickPeak > 1 {
		t.Fatalf("%d probes at once across replicas, want 1", sickPeak)
	}
	// The probes counted began within sickFor, one open period apart, or
	// (seen under load: 8 and 9 probes in 1.0 s of 150 ms periods) two in
	// a period, back to back, never at once: at most two for each period
	// that fits and for the one under way at start, and one for Redis's
	// clock, which may run a little apart from ours. A breaker that let a
	// probe through on every poll would see some forty.
	if most := 2*(int64(sickFor/openTimeout)+1) + 1; sickProbes > most {
		t.Fatalf("%d probes in %v of %v open periods, want at most %d", sickProbes, sickFor, openTimeout, most)
	}
}

// TestSharedProberDies: the replica holding the probe lease dies in the
// middle of its probe (it stops: no verdict, no renewal); its lease lapses
// after ProbeLease and another replica probes and closes the breaker. The
// other replica has no calls until then, so it does not take the lease
// (a replica takes it only when a call wants to probe).
func TestSharedProberDies(t *testing.T) {
	s := startRedis(t)
	cfg := redisstate.BreakerConfig{
		Breaker:      breaker.Config{Name: "dies", ConsecutiveFailures: 1, OpenTimeout: 100 * time.Millisecond},
		PollInterval: 10 * time.Millisecond, ProbeLease: 300 * time.Millisecond,
	}
	var logMu sync.Mutex
	var events []string
	t0 := time.Now()
	var rs []*redisstate.SharedBreaker
	for i := range 2 {
		c := cfg
		c.Redis = patientRedis(newClient(t, s.Addr()))
		c.Breaker.OnStateChange = func(from, to breaker.State) {
			logMu.Lock()
			events = append(events, fmt.Sprintf("%v %c %v>%v", time.Since(t0).Round(time.Millisecond), 'a'+i, from, to))
			logMu.Unlock()
		}
		rs = append(rs, newShared(t, c))
	}
	defer func() {
		if t.Failed() {
			logMu.Lock()
			t.Log(strings.Join(events, "\n"))
			logMu.Unlock()
		}
	}()
	a, b := rs[0], rs[1]
	failN(a, 1)
	eventually(t, patience, "open on b", func() bool { return b.State() == breaker.Open })
	// a probes once it holds the lease, and hangs in its probe.
	hang := make(chan struct{})
	defer close(hang)
	probing := make(chan struct{})
	go func() {
		for {
			err := a.Execute(context.Background(), func(context.Context) error { close(probing); <-hang; return nil })
			if err == nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	<-probing
	dbg := newClient(t, s.Addr())
	const probeKey = "{watertight:breaker:dies}:probe"
	holder, _ := dbg.Get(context.Background(), probeKey).Result()
	st, _ := dbg.HGetAll(context.Background(), "{watertight:breaker:dies}:state").Result()
	t.Logf("probing: a %v (replica %s), b %v (replica %s); lease holder %q, state %v", a.State(), a.Replica(), b.State(), b.Replica(), holder, st)
	a.Close() // no more polls, renewals or verdicts from a
	// What is left of a's lease, by Redis's clock, once a is dead: b may
	// not probe before it has passed. (A loaded machine may delay a's
	// renewals past the lease; then nothing is left and the check below
	// is void for this run, not failed.)
	asked := time.Now()
	left, err := dbg.PTTL(context.Background(), probeKey).Result()
	if h, _ := dbg.Get(context.Background(), probeKey).Result(); err != nil || h != a.Replica() {
		left = 0
	}
	// b is rejected while a's lease stands, then probes and closes.
	var admitted time.Time
	eventually(t, patience, "b probes after the dead prober's lease lapsed", func() bool {
		err := b.Execute(context.Background(), func(context.Context) error { return nil })
		if err == nil && admitted.IsZero() {
			admitted = time.Now()
		}
		return b.State() == breaker.Closed
	})
	// a's lease ended no sooner than left after asked; b's probe ran after
	// it had (and admitted is read after that probe). Redis rounds to the
	// millisecond: a millisecond of slack.
	if d := admitted.Sub(asked); left > 0 && d < left-time.Millisecond {
		t.Fatalf("b probed %v after a died, while a's lease stood for %v more (ProbeLease 300 ms)", d, left)
	}
	t.Logf("b probed %v after the prober died, its lease then %v from lapsing (ProbeLease 300ms)", admitted.Sub(asked), left)
}

// TestSharedCloseDuringOpen: a replica closed while a shared open period is
// in force goes on as a local breaker, as Close says: once the open period
// ends it probes (and closes on a success) rather than rejecting every call
// with half_open_full for good.
func TestSharedCloseDuringOpen(t *testing.T) {
	s := startRedis(t)
	rs := replicas(t, 2, s.Addr(), redisstate.BreakerConfig{
		Breaker:      breaker.Config{Name: "closing", ConsecutiveFailures: 2, OpenTimeout: 300 * time.Millisecond},
		PollInterval: 20 * time.Millisecond,
	})
	failN(rs[0], 2)
	eventually(t, patience, "the other replica opens", func() bool { return rs[1].State() == breaker.Open })
	rs[1].Close()
	eventually(t, patience, "the closed replica lets a call through", func() bool {
		ran := false
		rs[1].Execute(context.Background(), func(context.Context) error { ran = true; return nil })
		return ran
	})
}

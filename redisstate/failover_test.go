package redisstate_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/redisstate"
)

// holder runs calls that hold their place until the test ends.
type holder struct {
	release chan struct{}
	wg      sync.WaitGroup
	held    int // calls admitted so far
}

// newHolder returns a holder whose calls end, and are waited for, when the
// test ends.
func newHolder(t *testing.T) *holder {
	h := &holder{release: make(chan struct{})}
	t.Cleanup(func() { close(h.release); h.wg.Wait() })
	return h
}

// fill starts calls on b one at a time, each holding its place, until one
// is rejected; it returns how many were admitted, and the rejection.
func (h *holder) fill(b *redisstate.Budget) (int, error) {
	n := 0
	for {
		entered, done := make(chan struct{}), make(chan error, 1)
		h.wg.Go(func() {
			done <- b.Execute(context.Background(), func(context.Context) error {
				close(entered)
				<-h.release
				return nil
			})
		})
		select {
		case <-entered:
			n++
			h.held++
		case err := <-done:
			return n, err
		}
	}
}

// fleet returns a budget for each of cfgs, each with its own client of
// addr, whose guard on Redis tries again a millisecond after it opens. Each
// replica has reached Redis after the others did when it returns, so each
// has heard that Redis counts them all.
func fleet(t *testing.T, addr string, cfgs ...redisstate.BudgetConfig) []*redisstate.Budget {
	var out []*redisstate.Budget
	for _, c := range cfgs {
		c.Redis = redisstate.Redis{Client: newClient(t, addr), CallTimeout: patience, RetryAfter: time.Millisecond}
		out = append(out, newBudget(t, c))
	}
	for range 2 {
		for _, b := range out {
			if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
				t.Fatalf("with Redis up: %v", err)
			}
		}
	}
	return out
}

// rejectedFull reports whether err is a budget's rejection with reason
// "full".
func rejectedFull(err error) bool {
	var re *policy.RejectedError
	return errors.As(err, &re) && re.Kind == redisstate.KindBudget && re.Reason == bulkhead.ReasonFull
}

// TestBudgetSharesAfterDataLoss: the LocalShare fallback's shares add up to
// at most Limit plus one per replica after Redis lost its data. Restarted
// empty, Redis counts the replicas again from one as each comes back, and
// then goes away again before the first ones have heard the whole count.
func TestBudgetSharesAfterDataLoss(t *testing.T) {
	const limit, nrep = 9, 3
	s := startRedis(t)
	cfg := redisstate.BudgetConfig{Name: "shares", Limit: limit, LeaseTTL: 10 * time.Minute}
	budgets := fleet(t, s.Addr(), cfg, cfg, cfg)
	admin := newClient(t, s.Addr())
	const replicasKey = "{watertight:budget:shares}:replicas"
	if n := zcard(t, admin, replicasKey); n != nrep {
		t.Fatalf("Redis counts %d replicas, want %d", n, nrep)
	}
	s.Kill()
	s.Restart()
	warm(t, admin)
	for i, b := range budgets {
		eventually(t, patience, "the replica counted again", func() bool {
			b.Execute(context.Background(), func(context.Context) error { return nil })
			return zcard(t, admin, replicasKey) == int64(i+1)
		})
	}
	s.Kill()
	h := newHolder(t)
	var shares []int
	for _, b := range budgets {
		n, err := h.fill(b)
		if !rejectedFull(err) {
			t.Fatalf("over the share: %v", err)
		}
		shares = append(shares, n)
	}
	t.Logf("shares %v: %d in all (Limit %d, %d replicas)", shares, h.held, limit, nrep)
	if h.held > limit+nrep {
		t.Fatalf("the shares %v add up to %d, over Limit %d plus one per replica", shares, h.held, limit)
	}
}

// TestBudgetFailoverBound measures the fleet's calls in flight across a
// failover that loses every lease, in each Fallback mode, against the
// bound Budget's documentation gives. One replica holds every lease when
// Redis goes away; the others admit what their mode lets them while it is
// away; Redis comes back empty and admits up to Limit new calls. No call
// ends before the count, and every replica has a local bulkhead of Limit.
func TestBudgetFailoverBound(t *testing.T) {
	const limit, nrep = 10, 3
	share := (limit + nrep - 1) / nrep // from a count of nrep replicas
	for _, tc := range []struct {
		mode  redisstate.Fallback
		bound int
	}{
		{redisstate.LocalShare, 2*limit + nrep*share},
		{redisstate.FailOpen, nrep * limit}, // the local bulkheads
		{redisstate.FailClosed, 2 * limit},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			s := startRedis(t)
			var locals []*bulkhead.Bulkhead
			var cfgs []redisstate.BudgetConfig
			for range nrep {
				l, err := bulkhead.New(bulkhead.Config{Name: "local", Limit: limit})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				locals = append(locals, l)
				cfgs = append(cfgs, redisstate.BudgetConfig{Name: "failover", Limit: limit, Local: l,
					Fallback: tc.mode, LeaseTTL: 10 * time.Minute})
			}
			budgets := fleet(t, s.Addr(), cfgs...)
			admin := newClient(t, s.Addr())
			h := newHolder(t)
			if n, _ := h.fill(budgets[0]); n != limit || zcard(t, admin, leasesKey("failover")) != limit {
				t.Fatalf("replica 0 holds %d calls, %d leases; want %d", n, zcard(t, admin, leasesKey("failover")), limit)
			}
			s.Kill()
			for _, b := range budgets[1:] {
				h.fill(b)
			}
			away := h.held - limit
			s.Restart()
			warm(t, admin)
			room := 0
			for _, l := range locals {
				room += limit - l.Active()
			}
			want := int64(min(limit, room))
			eventually(t, patience, "Redis admits new calls up to Limit", func() bool {
				for _, b := range budgets {
					h.fill(b)
				}
				return zcard(t, admin, leasesKey("failover")) == want
			})
			t.Logf("%v: %d in flight at once (%d leased before, %d admitted while away, %d leased after); bound %d",
				tc.mode, h.held, limit, away, want, tc.bound)
			if h.held > tc.bound {
				t.Fatalf("%d calls in flight at once, over the bound %d", h.held, tc.bound)
			}
		})
	}
}

// TestBudgetBoundAfterRepeatedLosses: Redis restarted empty three times while the
// calls admitted before run on. Each loss leaves up to Limit calls
// without a lease, and Redis admits Limit new ones beside them: after k
// losses, one replica holding its calls has up to (1 + k) x Limit in
// flight (plus its share with LocalShare), the bound Budget's
// documentation gives.
func TestBudgetBoundAfterRepeatedLosses(t *testing.T) {
	const limit, losses = 3, 3
	for _, mode := range []redisstate.Fallback{redisstate.FailClosed, redisstate.LocalShare} {
		t.Run(mode.String(), func(t *testing.T) {
			s := startRedis(t)
			cfg := redisstate.BudgetConfig{Name: "losses", Limit: limit, Fallback: mode, LeaseTTL: 10 * time.Minute}
			b := fleet(t, s.Addr(), cfg)[0]
			admin := newClient(t, s.Addr())
			h := newHolder(t)
			if n, err := h.fill(b); n != limit || !rejectedFull(err) {
				t.Fatalf("with Redis up: %d admitted, then %v", n, err)
			}
			share := 0
			if mode == redisstate.LocalShare {
				share = limit // one replica counted
			}
			for k := 1; k <= losses; k++ {
				s.Kill()
				s.Restart()
				warm(t, admin)
				eventually(t, patience, "Redis admits new calls up to Limit", func() bool {
					h.fill(b)
					return zcard(t, admin, leasesKey("losses")) == limit
				})
				bound := lossBound(limit, k, share)
				t.Logf("after %d losses: %d calls in flight (Limit %d), bound %d", k, h.held, limit, bound)
				if h.held > bound {
					t.Fatalf("after %d losses: %d calls in flight, over the bound %d", k, h.held, bound)
				}
			}
		})
	}
}

// lossBound is the bound on the calls in flight that Budget's
// documentation gives after Redis lost leases k times while calls still in
// flight ran, shares being the sum of the LocalShare shares (0 with
// FailClosed).
func lossBound(limit, k, shares int) int { return (1+k)*limit + shares }

// TestBudgetShareOfReplicaFirstAnsweredAfterDataLoss: the condition of the
// LocalShare bound. Two replicas have heard Redis count both of them; Redis
// restarts empty, and a third replica, never answered before, is the
// first to reach it: it hears a count of 1, begun afresh. Redis then goes
// away: the two keep their shares of Limit / 2, and the third takes the
// whole Limit, so the shares add up to more than Limit plus one per
// replica, as Budget's documentation says they may.
func TestBudgetShareOfReplicaFirstAnsweredAfterDataLoss(t *testing.T) {
	const limit = 8
	s := startRedis(t)
	cfg := redisstate.BudgetConfig{Name: "newcomer", Limit: limit, LeaseTTL: 10 * time.Minute}
	budgets := fleet(t, s.Addr(), cfg, cfg)
	s.Kill()
	s.Restart()
	admin := newClient(t, s.Addr())
	warm(t, admin)
	budgets = append(budgets, fleet(t, s.Addr(), cfg)...)
	if n := zcard(t, admin, "{watertight:budget:newcomer}:replicas"); n != 1 {
		t.Fatalf("Redis counts %d replicas, want 1", n)
	}
	s.Kill()
	h := newHolder(t)
	var shares []int
	for _, b := range budgets {
		n, err := h.fill(b)
		if !rejectedFull(err) {
			t.Fatalf("over the share: %v", err)
		}
		shares = append(shares, n)
	}
	t.Logf("shares %v: %d in all (Limit %d, 3 replicas)", shares, h.held, limit)
	if want := []int{limit / 2, limit / 2, limit}; !slices.Equal(shares, want) {
		t.Fatalf("shares %v, want %v", shares, want)
	}
}

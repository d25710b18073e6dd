package redisstate_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight/watertight/redisstate"
)

// quotaStorm is what a storm of Takes on a Quota saw.
type quotaStorm struct {
	mu        sync.Mutex
	admitted  []arrival // when each admitted attempt ran, since start
	away      int       // admitted while Redis was away
	late      int       // admitted at or past its deadline: never
	overrun   time.Duration
	overrunAt time.Duration
	ended     int
}

// stormQuota runs callers goroutines on each of qs, each Take with a
// deadline of 300 ms, until stop is closed.
func stormQuota(qs []*redisstate.Quota, callers int, start time.Time, away *atomic.Bool, st *quotaStorm, stop chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, q := range qs {
		for range callers {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
					dl, _ := ctx.Deadline()
					wasAway := away.Load()
					err := q.Take(ctx, 0, dl.Add(-1))
					now := time.Now()
					cancel()
					st.mu.Lock()
					st.ended++
					switch {
					case err == nil && !now.Before(dl):
						st.late++
					case err == nil:
						st.admitted = append(st.admitted, arrival{at: now.Sub(start)})
						if wasAway && away.Load() {
							st.away++
						}
					case errors.Is(err, context.DeadlineExceeded):
						st.overrun = max(st.overrun, now.Sub(dl))
					}
					st.mu.Unlock()
					if err != nil {
						time.Sleep(5 * time.Millisecond)
					}
				}
			})
		}
	}
	return &wg
}

// reachable reports whether every quota's Report says Redis is reachable.
func reachable(qs []*redisstate.Quota) bool {
	for _, q := range qs {
		for _, f := range q.Report().Fields {
			if f.Name == "redis" && f.Value != "reachable" {
				return false
			}
		}
	}
	return true
}

// TestQuotaFaults: three replicas with the LocalShare fallback share a
// quota of 60 requests a second while Redis is killed, restarted empty,
// then frozen for 2 s. No attempt is admitted at or past its deadline;
// every replica is back on Redis soon after it answers; and in no second
// is the fleet admitted more than the quota plus two bursts (Redis's and
// the replicas' local shares of it).
func TestQuotaFaults(t *testing.T) {
	st, most, log := quotaFaults(t, 100*time.Millisecond)
	t.Log(log)
	if st.late != 0 {
		t.Errorf("%d attempts admitted at or past their deadline", st.late)
	}
	if st.away == 0 {
		t.Errorf("nothing admitted while Redis was away: the LocalShare fallback never ran")
	}
	if bound := fleetRequests + 2*fleetBurst; most > bound {
		t.Errorf("%d admitted in one second, more than quota plus two bursts (%d)", most, bound)
	}
}

// quotaFaults runs the storm of TestQuotaFaults with the given
// CallTimeout, and returns what it saw, the most admitted in a second,
// and a report of it.
func quotaFaults(t *testing.T, callTimeout time.Duration) (*quotaStorm, int, string) {
	s := startRedis(t)
	var qs []*redisstate.Quota
	for range 3 {
		qs = append(qs, newQuota(t, redisstate.QuotaConfig{Name: "faults", Interval: time.Second, Requests: fleetRequests,
			Redis: redisstate.Redis{Client: newClient(t, s.Addr()), CallTimeout: callTimeout, RetryAfter: 200 * time.Millisecond}}))
	}
	start := time.Now()
	var away atomic.Bool
	var st quotaStorm
	stop := make(chan struct{})
	wg := stormQuota(qs, 4, start, &away, &st, stop)
	var backs []time.Duration
	back := func(what string) {
		away.Store(false)
		at := time.Now()
		eventually(t, patience, "every replica back on Redis after "+what, func() bool { return reachable(qs) })
		backs = append(backs, time.Since(at).Round(time.Millisecond))
		time.Sleep(time.Second)
	}
	time.Sleep(time.Second)
	away.Store(true)
	s.Kill()
	time.Sleep(1500 * time.Millisecond)
	s.Restart()
	back("a kill and a restart, empty")
	away.Store(true)
	s.Freeze()
	time.Sleep(2 * time.Second)
	s.Thaw()
	back("a freeze of 2s")
	close(stop)
	wg.Wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	as := slices.Clone(st.admitted)
	slices.SortFunc(as, func(a, b arrival) int { return int(a.at - b.at) })
	most, _ := window(as, time.Second)
	log := fmt.Sprintf("3 replicas x 4 callers, quota %d/s (burst %d), RetryAfter 200ms, CallTimeout %v: killed 1.5 s then restarted empty, back on Redis in %v; frozen 2 s, back in %v; %d attempts ended, %d admitted (%d while Redis was away) in %v; most admitted in a second %d (bound: quota plus two bursts, %d); latest return past a deadline %v",
		fleetRequests, fleetBurst, callTimeout, backs[0], backs[1], st.ended, len(as), st.away, time.Since(start).Round(time.Millisecond), most, fleetRequests+2*fleetBurst, st.overrun)
	return &st, most, log
}

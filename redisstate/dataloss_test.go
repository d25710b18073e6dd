package redisstate_test

import (
	"context"
	"testing"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/redisstate"
)

// TestSharedBreakerFollowsNewPeriodAfterDataLoss: Redis loses the shared
// state (FLUSHALL, as a restart without persistence does) while the
// replicas hold a shared open period that has turned half-open, and in
// the same transaction a replica trips, opening a new period for an hour.
// Every replica follows the new period, by its message or by its next
// poll: each is open, and a prober whose probe of the lost period
// succeeds does not close.
func TestSharedBreakerFollowsNewPeriodAfterDataLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  redisstate.BreakerConfig
	}{
		// Polling off: only the message can bring the new period.
		{"subscription", redisstate.BreakerConfig{PollInterval: time.Hour}},
		// Subscription off: only the polls can.
		{"polling", redisstate.BreakerConfig{NoSubscribe: true, PollInterval: 20 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startRedis(t)
			name := "dataloss-" + tc.name
			channel := "{watertight:breaker:" + name + "}:events"
			// The first period lasts the tripper's 100 ms; the replicas
			// hold an open for up to an hour, as long as the second
			// period.
			short, long := tc.cfg, tc.cfg
			short.Breaker = breaker.Config{Name: name, ConsecutiveFailures: 1, OpenTimeout: 100 * time.Millisecond}
			long.Breaker = breaker.Config{Name: name, ConsecutiveFailures: 1, OpenTimeout: time.Hour}
			tripper := replicas(t, 1, s.Addr(), short)[0]
			rs := replicas(t, 3, s.Addr(), long) // rs[2] trips the second period
			if !tc.cfg.NoSubscribe {
				pub := newClient(t, s.Addr())
				eventually(t, patience, "every replica subscribed", func() bool { return numsub(t, pub, channel) == 4 })
			}
			failN(tripper, 1)
			for _, r := range rs[:2] {
				eventually(t, patience, "the replicas hold the first period", func() bool { return r.State() != breaker.Closed })
				eventually(t, patience, "the first period half-open", func() bool { return r.State() == breaker.HalfOpen })
			}
			release := make(chan struct{})
			probed := make(chan error, 1)
			if tc.cfg.NoSubscribe {
				// rs[1] takes the probe lease at a poll and probes.
				eventually(t, patience, "rs[1] probes", func() bool {
					entered := make(chan struct{})
					done := make(chan error, 1)
					go func() {
						done <- rs[1].Execute(context.Background(), func(context.Context) error {
							close(entered)
							<-release
							return nil
						})
					}()
					select {
					case <-entered:
						go func() { probed <- <-done }()
						return true
					case <-done:
						return false
					}
				})
			}
			if err := redisstate.TripAfterFlush(context.Background(), rs[2]); err != nil {
				t.Fatal(err)
			}
			if tc.cfg.NoSubscribe {
				close(release)
				if err := <-probed; err != nil {
					t.Fatalf("the probe: %v", err)
				}
			}
			var states []breaker.State
			deadline := time.Now().Add(patience)
			for open := false; !open; time.Sleep(5 * time.Millisecond) {
				states, open = states[:0], true
				for _, r := range rs {
					states = append(states, r.State())
					open = open && r.State() == breaker.Open
				}
				if !open && time.Now().After(deadline) {
					t.Fatalf("replicas %v, not all open for the second period within %v", states, patience)
				}
			}
			ran := 0
			for range 100 {
				if rs[1].Execute(context.Background(), func(context.Context) error { return nil }) == nil {
					ran++
				}
			}
			if ran > 0 {
				t.Fatalf("%d of 100 calls ran on a replica while the shared breaker is open", ran)
			}
		})
	}
}

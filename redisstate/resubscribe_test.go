package redisstate_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/redisstate"
)

// numsub returns the number of subscribers of channel.
func numsub(t testing.TB, c redis.UniversalClient, channel string) int64 {
	t.Helper()
	m, err := c.PubSubNumSub(context.Background(), channel).Result()
	if err != nil {
		return -1 // the server is restarting
	}
	return m[channel]
}

// warm makes c's next round trips go over live connections: after a
// restart its pooled connections are dead, and the first command on each
// fails (NewClient retries nothing), which would make the policy fall back
// and lose the message under test.
func warm(t testing.TB, c redis.UniversalClient) {
	t.Helper()
	ok := 0
	eventually(t, patience, "the client's connections are live", func() bool {
		if c.Ping(context.Background()).Err() != nil {
			ok = 0
			return false
		}
		ok++
		return ok >= 8
	})
}

// TestSharedResubscribes: once a replica's subscription is cut (CLIENT
// KILL TYPE pubsub, or a restart of redis-server on the same port, found
// by its PID), it subscribes again, and the shared state's updates reach
// it again by message. Polling is off (an hour), so only the subscription
// can bring the open state to replica b.
func TestSharedResubscribes(t *testing.T) {
	for _, how := range []string{"client-kill", "restart"} {
		t.Run(how, func(t *testing.T) {
			srv := startRedis(t)
			admin := newClient(t, srv.Addr())
			ca, cb := newClient(t, srv.Addr()), newClient(t, srv.Addr())
			cfg := redisstate.BreakerConfig{
				Breaker:      breaker.Config{Name: "resub", ConsecutiveFailures: 3, OpenTimeout: 10 * time.Second},
				PollInterval: time.Hour,
			}
			cfg.Redis = patientRedis(ca)
			a := newShared(t, cfg)
			cfg.Redis = patientRedis(cb)
			b := newShared(t, cfg)
			const channel = "{watertight:breaker:resub}:events"
			eventually(t, patience, "both replicas subscribed", func() bool { return numsub(t, admin, channel) == 2 })

			switch how {
			case "client-kill":
				n, err := admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Result()
				if err != nil || n < 2 {
					t.Fatalf("CLIENT KILL TYPE pubsub: %d killed, %v; want both subscriptions", n, err)
				}
			case "restart":
				pid := srv.PID()
				srv.Kill()
				srv.Restart()
				if srv.PID() == pid || srv.PID() == 0 {
					t.Fatalf("redis-server not restarted: PID %d, then %d", pid, srv.PID())
				}
				warm(t, admin)
				warm(t, ca)
			}
			// The count reaches 2 again only when both have subscribed
			// again: after the kill it drops (CLIENT KILL is synchronous;
			// the restarted server starts with none).
			eventually(t, patience, "both replicas subscribed again", func() bool { return numsub(t, admin, channel) == 2 })
			if st := b.State(); st != breaker.Closed {
				t.Fatalf("b before the trip: %v", st)
			}
			failN(a, 3)
			if st := a.State(); st != breaker.Open {
				t.Fatalf("tripping replica: %v", st)
			}
			eventually(t, patience, "the open state reaches b by message after resubscription", func() bool {
				return b.State() == breaker.Open
			})
		})
	}
}

package redisstate_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/redisstate"
)

// FuzzParseMessage: any payload on the breaker's channel is parsed without
// panicking; what parses is a period identity in [1, 2^53) and a remaining time
// within a year either way, and re-formatting it parses the same.
func FuzzParseMessage(f *testing.F) {
	for _, s := range []string{"open 1 30000", "closed 7", "open 1", "open x 5", "closed 0", "open 3 -5",
		"open 9223372036854775807 9223372036854775807", " open  2  10 ", "", "closed 1 2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		open, gen, rem, ok := redisstate.ParseMessage(p)
		if !ok {
			return
		}
		if gen <= 0 || gen >= 1<<53 || rem > 366*24*time.Hour || rem < -366*24*time.Hour {
			t.Fatalf("%q parsed as gen %d, remaining %v", p, gen, rem)
		}
		again := "closed " + strconv.FormatInt(gen, 10)
		if open {
			again = "open " + strconv.FormatInt(gen, 10) + " " + strconv.FormatInt(rem.Milliseconds(), 10)
		}
		o2, g2, r2, ok2 := redisstate.ParseMessage(again)
		if !ok2 || o2 != open || g2 != gen || r2 != rem {
			t.Fatalf("%q -> %q parsed differently", p, again)
		}
	})
}

// TestForgedMessages: garbage published on the breaker's channel by some
// other client changes nothing; a real open still arrives after it.
func TestForgedMessages(t *testing.T) {
	s := startRedis(t)
	rs := replicas(t, 2, s.Addr(), redisstate.BreakerConfig{
		Breaker: breaker.Config{Name: "forged", ConsecutiveFailures: 1, OpenTimeout: time.Minute}, PollInterval: time.Hour})
	pub := newClient(t, s.Addr())
	// Polling is off: a replica not yet subscribed would miss the open.
	eventually(t, patience, "both replicas subscribed", func() bool {
		return numsub(t, pub, "{watertight:breaker:forged}:events") == 2
	})
	for _, m := range []string{"open", "open x 1", "open 1 99999999999999999", "closed -1", "\x00\xff", "open 0 100", "open 9007199254740992 100", "hello world"} {
		if err := pub.Publish(context.Background(), "{watertight:breaker:forged}:events", m).Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	for _, r := range rs {
		if err := r.Execute(context.Background(), func(context.Context) error { return nil }); err != nil || r.State() != breaker.Closed {
			t.Fatalf("after forged messages: %v, %v", err, r.State())
		}
	}
	failN(rs[0], 1)
	eventually(t, patience, "a real open after the forged ones", func() bool { return rs[1].State() == breaker.Open })
}

// TestForgedOpenBoundedByOpenTimeout: a well-formed open that asks for an
// hour holds a replica for no longer than its own OpenTimeout, after which
// it is half-open. Polling is off (an hour), so only the message applies.
func TestForgedOpenBoundedByOpenTimeout(t *testing.T) {
	s := startRedis(t)
	const channel = "{watertight:breaker:bounded}:events"
	r := replicas(t, 1, s.Addr(), redisstate.BreakerConfig{
		Breaker: breaker.Config{Name: "bounded", OpenTimeout: 200 * time.Millisecond}, PollInterval: time.Hour})[0]
	pub := newClient(t, s.Addr())
	eventually(t, patience, "the replica subscribed", func() bool { return numsub(t, pub, channel) == 1 })
	if err := pub.Publish(context.Background(), channel, "open 1 3600000").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, patience, "the message applied", func() bool { return r.State() != breaker.Closed })
	applied := time.Now()
	eventually(t, patience, "half-open once the replica's own OpenTimeout has passed", func() bool { return r.State() == breaker.HalfOpen })
	t.Logf("half-open %v after the message was applied (OpenTimeout 200ms)", time.Since(applied))
}

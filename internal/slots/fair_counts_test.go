package slots

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/policy"
)

// checkQueuedBy fails the test unless s counts want[c] waiters of class
// c (sheddable, default, critical).
func checkQueuedBy(t *testing.T, s *Slots, want [classes]int) {
	t.Helper()
	for c := range classes {
		if got := s.QueuedBy(policy.Priority(c - 1)); got != want[c] {
			t.Errorf("QueuedBy(%v) = %d; want %d", policy.Priority(c-1), got, want[c])
		}
	}
}

// TestFairQueuedByWhenAKeyLeaves: with the fair share, a waiter that is
// the last of its key leaves the count of its own priority, whether it
// is served, gives up, times out or is shed.
func TestFairQueuedByWhenAKeyLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &Slots{Owner: "test"}
		s.Init(1, 3, time.Second, nil, Keys{Fair: true})
		c := newCaller(s)
		c.start(plain, "h")
		c.start(key(plain, "a"), "a1")
		ctx, cancel := context.WithCancel(key(critical, "b"))
		c.start(ctx, "b1")
		c.start(key(sheddable, "s"), "s1")
		checkQueuedBy(t, s, [classes]int{1, 1, 1})
		cancel() // b's last waiter gives up
		c.outcome("b1")
		checkQueuedBy(t, s, [classes]int{1, 1, 0})
		c.release("h") // a's last waiter is served
		checkQueuedBy(t, s, [classes]int{1, 0, 0})
		c.start(key(critical, "k"), "k1")
		c.start(key(critical, "k"), "k2")
		c.start(key(critical, "k"), "k3") // sheds s's last waiter
		if o := c.outcome("s1"); o != RejectedShed {
			t.Fatalf("s1: %v; want RejectedShed", o)
		}
		checkQueuedBy(t, s, [classes]int{0, 0, 3})
		time.Sleep(time.Second) // the bubble's clock: k's MaxWait passes
		for _, n := range []string{"k1", "k2", "k3"} {
			c.outcome(n)
		}
		checkQueuedBy(t, s, [classes]int{})
		c.release("a1")
		checkCounts(t, s, 0, 0)
	})
}

// TestFairShedTieInOwnPriority: of keys with as many waiters in the
// newcomer's priority, the one whose turn comes last loses its newest.
func TestFairShedTieInOwnPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newKeyed(1, 4, 0)
		c := newCaller(s)
		c.start(plain, "h")
		for _, n := range []string{"a1", "b1", "a2", "b2"} {
			c.start(key(plain, n[:1]), n)
		}
		c.start(key(plain, "c"), "c1")
		if o := c.outcome("b2"); o != RejectedShed {
			t.Fatalf("b2: %v; want RejectedShed", o)
		}
		for _, n := range []string{"h", "a1", "b1", "c1", "a2"} {
			c.release(n)
		}
		if got, want := c.admitted(99), "h,a1,b1,c1,a2"; got != want {
			t.Errorf("admitted %s; want %s", got, want)
		}
		checkKeys(t, s, 0)
	})
}

// TestCapLeavesNoSlotToALowerPriority: when every key waiting at a
// priority is at its cap, a lower priority takes the free slot; the
// capped key is served first once it frees one.
func TestCapLeavesNoSlotToALowerPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newKeyed(2, Unbounded, 1)
		c := newCaller(s)
		c.start(key(critical, "a"), "a1")
		c.start(key(critical, "a"), "a2")  // a at its cap: waits
		c.start(key(sheddable, "b"), "s1") // takes the free slot
		c.start(key(sheddable, "b"), "s2")
		checkCounts(t, s, 2, 2)
		c.release("a1")
		c.release("s1")
		if got, want := c.admitted(99), "a1,s1,a2,s2"; got != want {
			t.Errorf("admitted %s; want %s", got, want)
		}
		c.release("a2")
		c.release("s2")
		checkCounts(t, s, 0, 0)
		checkKeys(t, s, 0)
	})
}

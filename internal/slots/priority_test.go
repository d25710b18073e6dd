package slots

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/watertight/watertight/policy"
)

var (
	sheddable = policy.WithPriority(context.Background(), policy.PrioritySheddable)
	critical  = policy.WithPriority(context.Background(), policy.PriorityCritical)
	plain     = context.Background() // default
)

func TestWaitersServedHighestPriorityFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlots(1, Unbounded, 0)
		c := newCaller(s)
		c.start(plain, "h")
		c.start(sheddable, "s1")
		c.start(plain, "d1")
		c.start(sheddable, "s2")
		c.start(critical, "c1")
		c.start(plain, "d2")
		c.start(critical, "c2")
		for _, name := range []string{"h", "c1", "c2", "d1", "d2", "s1", "s2"} {
			c.release(name)
		}
		if got, want := c.admitted(99), "h,c1,c2,d1,d2,s1,s2"; got != want {
			t.Errorf("admitted %s; want %s", got, want)
		}
	})
}

func TestFullQueueShedsNewestOfLowestPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlots(1, 3, 0)
		c := newCaller(s)
		c.start(plain, "h")
		c.start(sheddable, "s1")
		c.start(sheddable, "s2")
		c.start(plain, "d1")
		c.start(critical, "c1") // sheds s2
		if o := c.outcome("s2"); o != RejectedShed {
			t.Fatalf("s2: %v; want RejectedShed", o)
		}
		c.start(plain, "d2") // sheds s1
		if o := c.outcome("s1"); o != RejectedShed {
			t.Fatalf("s1: %v; want RejectedShed", o)
		}
		// Nobody below default waits: a default caller is rejected, and so
		// is a sheddable one.
		for _, ctx := range []context.Context{plain, sheddable} {
			if o, _, _ := s.Acquire(ctx); o != RejectedFull {
				t.Fatalf("Acquire(%v) on a full queue of higher priorities = %v; want RejectedFull", policy.PriorityOf(ctx), o)
			}
		}
		checkCounts(t, s, 1, 3)
		for _, name := range []string{"h", "c1", "d1", "d2"} {
			c.release(name)
		}
		if got, want := c.admitted(99), "h,c1,d1,d2"; got != want {
			t.Errorf("admitted %s; want %s", got, want)
		}
	})
}

func TestReserveKeepsSlotsForHigherPriorities(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &Slots{Owner: "test"}
		s.Init(5, Unbounded, 0, map[policy.Priority]int{policy.PriorityCritical: 2, policy.PriorityDefault: 1}, Keys{})
		c := newCaller(s)
		// Sheddable calls take 2 slots of 5, default 3, critical all 5.
		for _, name := range []string{"s1", "s2", "s3"} {
			c.start(sheddable, name)
		}
		checkCounts(t, s, 2, 1)
		c.start(plain, "d1")
		c.start(plain, "d2")
		checkCounts(t, s, 3, 2)
		c.start(critical, "c1")
		c.start(critical, "c2")
		c.start(critical, "c3")
		checkCounts(t, s, 5, 3)
		// A freed slot goes to the critical waiter; the next, to default
		// only once fewer than 3 slots are held.
		c.release("s1")
		if got, want := c.admitted(99), "s1,s2,d1,c1,c2,c3"; got != want {
			t.Fatalf("admitted %s; want %s", got, want)
		}
		c.release("c1")
		c.release("c2")
		checkCounts(t, s, 3, 2) // s2, d1, c3 hold; d2 may not take a 4th
		c.release("c3")
		if got, want := c.admitted(99), "s1,s2,d1,c1,c2,c3,d2"; got != want {
			t.Fatalf("admitted %s; want %s", got, want)
		}
		for _, name := range []string{"s2", "d1", "d2", "s3"} {
			c.release(name)
		}
		checkCounts(t, s, 0, 0)
	})
}

func TestPriorityCostsNoAllocation(t *testing.T) {
	s := &Slots{Owner: "test"}
	s.Init(2, 0, 0, map[policy.Priority]int{policy.PriorityCritical: 1}, Keys{})
	if n := testing.AllocsPerRun(100, func() {
		if o, _, _ := s.Acquire(critical); o == Admitted {
			s.Release(Held{})
		}
	}); n != 0 {
		t.Errorf("Acquire and Release with a priority: %v allocs; want 0", n)
	}
	s.Acquire(critical)
	if n := testing.AllocsPerRun(100, func() { s.Acquire(sheddable) }); n != 0 {
		t.Errorf("Acquire rejected by a reserve: %v allocs; want 0", n)
	}
	s.Release(Held{})
}

package slots

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/policy"
)

// newKeyed returns initialized slots with a fair share and a cap per key
// of maxPerKey (0: none).
func newKeyed(limit, queueCap, maxPerKey int) *Slots {
	s := &Slots{Owner: "test"}
	s.Init(limit, queueCap, 0, nil, Keys{Fair: true, MaxPerKey: maxPerKey})
	return s
}

// key returns ctx carrying key.
func key(ctx context.Context, k string) context.Context { return policy.WithKey(ctx, k) }

// checkKeys fails the test unless s tracks n keys.
func checkKeys(t *testing.T, s *Slots, n int) {
	t.Helper()
	if got := s.KeysTracked(); got != n {
		t.Fatalf("KeysTracked = %d; want %d", got, n)
	}
}

// TestFairAlternation: a key with 500 waiters and a key with one get the
// slots freed in turn: the one waiter is served at the second release,
// and the 500 are served first come first served.
func TestFairAlternation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newKeyed(1, Unbounded, 0)
		c := newCaller(s)
		c.start(key(plain, "x"), "h")
		for i := range 500 {
			c.start(key(plain, "a"), "a"+strconv.Itoa(i))
		}
		c.start(key(plain, "b"), "b")
		checkCounts(t, s, 1, 501)
		c.release("h")
		c.release("a0")
		if got := c.admitted(99); got != "h,a0,b" {
			t.Fatalf("admitted %s; want h,a0,b", got)
		}
		c.release("b")
		for i := 1; i < 500; i++ {
			c.release("a" + strconv.Itoa(i))
		}
		want := []string{"h", "a0", "b"}
		for i := 1; i < 500; i++ {
			want = append(want, "a"+strconv.Itoa(i))
		}
		if got := c.admitted(999); got != strings.Join(want, ",") {
			t.Fatalf("admitted %s", got)
		}
		checkCounts(t, s, 0, 0)
		checkKeys(t, s, 0)
	})
}

// TestFairRoundRobin: keys take turns in the order they started waiting,
// first come first served within a key; calls without a key are one key.
func TestFairRoundRobin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newKeyed(1, Unbounded, 0)
		c := newCaller(s)
		c.start(plain, "h")
		for _, n := range []string{"a1", "a2", "a3", "b1", "n1", "b2", "n2", "c1"} {
			ctx := plain
			if n[0] != 'n' {
				ctx = key(plain, n[:1])
			}
			c.start(ctx, n)
		}
		checkKeys(t, s, 3) // a, b, c; the calls without a key wait in the share of ""
		for _, n := range []string{"h", "a1", "b1", "n1", "c1", "a2", "b2", "n2", "a3"} {
			c.release(n)
		}
		if got, want := c.admitted(99), "h,a1,b1,n1,c1,a2,b2,n2,a3"; got != want {
			t.Errorf("admitted %s; want %s", got, want)
		}
		checkKeys(t, s, 0)
	})
}

// TestFairPrioritiesFirst: a higher priority is served before a lower
// one, whatever the keys' turns.
func TestFairPrioritiesFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newKeyed(1, Unbounded, 0)
		c := newCaller(s)
		c.start(plain, "h")
		c.start(key(plain, "a"), "a1")
		c.start(key(sheddable, "b"), "s1")
		c.start(key(critical, "a"), "c1")
		c.start(key(plain, "b"), "b1")
		c.start(key(critical, "b"), "c2")
		c.start(key(critical, "a"), "c3")
		for _, n := range []string{"h", "c1", "c2", "c3", "a1", "b1", "s1"} {
			c.release(n)
		}
		if got, want := c.admitted(99), "h,c1,c2,c3,a1,b1,s1"; got != want {
			t.Errorf("admitted %s; want %s", got, want)
		}
	})
}

// TestMaxPerKey: a key at its cap waits while other keys take the free
// slots, is passed over in its turn, and is served when it frees a slot.
func TestMaxPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newKeyed(3, Unbounded, 1)
		c := newCaller(s)
		c.start(key(plain, "a"), "a1")
		c.start(key(plain, "a"), "a2") // waits with two slots free
		c.start(key(plain, "b"), "b1") // takes one at once
		checkCounts(t, s, 2, 1)
		c.start(key(plain, "c"), "c1")
		c.start(key(plain, "d"), "d1") // the slots are all taken
		checkCounts(t, s, 3, 2)
		c.release("c1") // a's turn, but a is at its cap: d1
		if got := c.admitted(99); got != "a1,b1,c1,d1" {
			t.Fatalf("admitted %s; want a1,b1,c1,d1", got)
		}
		c.release("a1") // a below its cap: a2
		if got := c.admitted(99); got != "a1,b1,c1,d1,a2" {
			t.Fatalf("admitted %s; want a1,b1,c1,d1,a2", got)
		}
		checkKeys(t, s, 3)
		for _, n := range []string{"b1", "d1", "a2"} {
			c.release(n)
		}
		checkCounts(t, s, 0, 0)
		checkKeys(t, s, 0)
	})
}

// TestMaxPerKeyNoQueue: a key at its cap that may not wait is rejected
// key_full, even with slots free; another key finding no slot, full.
func TestMaxPerKeyNoQueue(t *testing.T) {
	s := newKeyed(2, 0, 1)
	a := key(plain, "a")
	_, ha, _ := s.Acquire(a)
	if o, _, _ := s.Acquire(a); o != RejectedKeyFull {
		t.Fatalf("second call of a key at its cap: %v; want RejectedKeyFull", o)
	}
	_, hb, _ := s.Acquire(key(plain, "b"))
	if o, _, _ := s.Acquire(key(plain, "c")); o != RejectedFull {
		t.Fatalf("a call finding no slot: %v; want RejectedFull", o)
	}
	s.Release(ha)
	s.Release(hb)
	checkCounts(t, s, 0, 0)
	checkKeys(t, s, 0)
}

// TestSetMaxPerKey: a cap set later counts the slots taken after it; one
// raised grants the slots it opens at once.
func TestSetMaxPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newKeyed(4, Unbounded, 0)
		c := newCaller(s)
		c.start(key(plain, "a"), "a1") // not counted
		s.Set(4, Unbounded, 0, nil, Keys{Fair: true, MaxPerKey: 1})
		c.start(key(plain, "a"), "a2") // counted: a at its cap
		c.start(key(plain, "a"), "a3")
		checkCounts(t, s, 2, 1)
		s.Set(4, Unbounded, 0, nil, Keys{Fair: true, MaxPerKey: 2})
		checkCounts(t, s, 3, 0)
		s.Set(4, Unbounded, 0, nil, Keys{Fair: true})
		for _, n := range []string{"a1", "a2", "a3"} {
			c.release(n)
		}
		checkCounts(t, s, 0, 0)
		checkKeys(t, s, 0)
	})
}

// TestFairShed: a full queue sheds the newest waiter of the key with the
// most waiters, while it has more than the newcomer's key would have.
func TestFairShed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newKeyed(1, 3, 0)
		c := newCaller(s)
		c.start(plain, "h")
		for _, n := range []string{"a1", "a2", "a3"} {
			c.start(key(plain, "a"), n)
		}
		c.start(key(plain, "b"), "b1") // a: 3 > 1: sheds a3
		if o := c.outcome("a3"); o != RejectedShed {
			t.Fatalf("a3: %v; want RejectedShed", o)
		}
		c.start(key(plain, "c"), "c1") // a: 2 > 1: sheds a2
		if o := c.outcome("a2"); o != RejectedShed {
			t.Fatalf("a2: %v; want RejectedShed", o)
		}
		// Every key has one: a new key, or a second of b, is rejected.
		for _, k := range []string{"d", "b"} {
			if o, _, _ := s.Acquire(key(plain, k)); o != RejectedFull {
				t.Fatalf("key %s on a balanced full queue: %v; want RejectedFull", k, o)
			}
		}
		// A higher priority sheds from the class below: of keys as long,
		// the one whose turn comes last (c).
		c.start(key(critical, "a"), "k1")
		if o := c.outcome("c1"); o != RejectedShed {
			t.Fatalf("c1: %v; want RejectedShed", o)
		}
		for _, n := range []string{"h", "k1", "a1", "b1"} {
			c.release(n)
		}
		if got, want := c.admitted(99), "h,k1,a1,b1"; got != want {
			t.Errorf("admitted %s; want %s", got, want)
		}
		checkCounts(t, s, 0, 0)
		checkKeys(t, s, 0)
	})
}

// TestFairShedFromLowerClass: a newcomer of a higher class sheds, in the
// lowest class waiting, the newest waiter of its longest key.
func TestFairShedFromLowerClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newKeyed(1, 4, 0)
		c := newCaller(s)
		c.start(plain, "h")
		c.start(key(sheddable, "a"), "s1")
		c.start(key(sheddable, "b"), "s2")
		c.start(key(sheddable, "b"), "s3")
		c.start(key(plain, "b"), "d1")
		c.start(key(critical, "c"), "c1") // sheds s3, b's newest sheddable
		if o := c.outcome("s3"); o != RejectedShed {
			t.Fatalf("s3: %v; want RejectedShed", o)
		}
		for _, n := range []string{"h", "c1", "d1", "s1", "s2"} {
			c.release(n)
		}
		checkCounts(t, s, 0, 0)
	})
}

// TestShedOwnKey: a newcomer that sheds the last waiter of its own key,
// of a lower class, waits in its key's new state.
func TestShedOwnKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newKeyed(1, 1, 0)
		c := newCaller(s)
		c.start(key(plain, "x"), "h")
		c.start(key(sheddable, "a"), "s1")
		c.start(key(critical, "a"), "k1") // sheds s1, a's last waiter
		if o := c.outcome("s1"); o != RejectedShed {
			t.Fatalf("s1: %v; want RejectedShed", o)
		}
		checkKeys(t, s, 1)
		c.start(key(critical, "b"), "k2") // a: 1, b would have 1: full
		if o := c.outcome("k2"); o != RejectedFull {
			t.Fatalf("k2: %v; want RejectedFull", o)
		}
		c.release("h")
		c.release("k1")
		if got := c.admitted(99); got != "h,k1" {
			t.Fatalf("admitted %s; want h,k1", got)
		}
		checkCounts(t, s, 0, 0)
		checkKeys(t, s, 0)
	})
}

// TestKeyFullWhenQueueFull: a key at its cap finding the queue full and
// nothing to shed is rejected key_full.
func TestKeyFullWhenQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newKeyed(2, 1, 1)
		c := newCaller(s)
		c.start(key(plain, "a"), "a1")
		c.start(key(plain, "a"), "a2")
		if o, _, _ := s.Acquire(key(plain, "a")); o != RejectedKeyFull {
			t.Fatalf("a third call of a: %v; want RejectedKeyFull", o)
		}
		c.release("a1")
		c.release("a2")
		checkCounts(t, s, 0, 0)
		checkKeys(t, s, 0)
	})
}

// TestFairGiveUp: waiters of a key that give up, by ctx or by MaxWait,
// and waiters granted a slot as their ctx ends, leave no state behind.
func TestFairGiveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &Slots{Owner: "test"}
		s.Init(1, Unbounded, time.Second, nil, Keys{Fair: true, MaxPerKey: 1})
		c := newCaller(s)
		c.start(key(plain, "h"), "h")
		ctx, cancel := context.WithCancel(key(plain, "a"))
		c.start(ctx, "a1")
		c.start(key(plain, "b"), "b1")
		checkKeys(t, s, 3)
		cancel()
		if o := c.outcome("a1"); o != CtxDone {
			t.Fatalf("a1: %v; want CtxDone", o)
		}
		checkKeys(t, s, 2)
		time.Sleep(time.Second) // the bubble's clock: b1's MaxWait passes
		if o := c.outcome("b1"); o != RejectedWaitTimeout {
			t.Fatalf("b1: %v; want RejectedWaitTimeout", o)
		}
		checkKeys(t, s, 1)
		c.release("h")
		checkCounts(t, s, 0, 0)
		checkKeys(t, s, 0)
	})
	t.Run("granted as its ctx ends", func(t *testing.T) {
		s := newKeyed(1, Unbounded, 1)
		_, h, _ := s.Acquire(key(plain, "h"))
		ctx, cancel := context.WithCancel(key(plain, "a"))
		s.mu.Lock()
		sh := s.shareFor("a")
		w := &waiter{ready: make(chan struct{}, 1), line: &sh.lines[1]}
		s.push(w)
		s.mu.Unlock()
		s.Release(h) // hands the slot to w, counted against a
		cancel()
		if o, _, err := s.wait(ctx, w, 0); o != CtxDone || err != context.Canceled {
			t.Fatalf("wait = %v, %v; want CtxDone, Canceled", o, err)
		}
		checkCounts(t, s, 0, 0)
		checkKeys(t, s, 0)
	})
}

// TestKeysBounded: many calls with fresh keys, under contention, some
// giving up as they wait, leave no key's state and no slot behind.
func TestKeysBounded(t *testing.T) {
	calls := 1 << 20
	if testing.Short() {
		calls = 1 << 14
	}
	s := &Slots{Owner: "test"}
	s.Init(4, Unbounded, 0, nil, Keys{Fair: true, MaxPerKey: 1})
	const workers = 16
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := g; i < calls; i += workers {
				ctx, cancel := context.WithCancel(key(plain, strconv.Itoa(i/4)))
				if i%8 == 0 {
					go cancel() // races the wait
				}
				if o, h, _ := s.Acquire(ctx); o == Admitted {
					s.Release(h)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	checkCounts(t, s, 0, 0)
	checkKeys(t, s, 0)
}

// TestCheckKeys: a cap needs the fair share, and no cap is negative.
func TestCheckKeys(t *testing.T) {
	for _, tc := range []struct {
		k    Keys
		want string
	}{
		{Keys{}, ""},
		{Keys{Fair: true, MaxPerKey: 3}, ""},
		{Keys{MaxPerKey: 3}, "x: Config.MaxPerKey needs FairShare"},
		{Keys{Fair: true, MaxPerKey: -1}, "x: Config.MaxPerKey must be >= 0, got -1"},
	} {
		err := CheckKeys("x", tc.k)
		if got := fmt.Sprint(err); (err == nil) != (tc.want == "") || (err != nil && !strings.HasPrefix(got, tc.want)) {
			t.Errorf("CheckKeys(%+v) = %v; want %q", tc.k, err, tc.want)
		}
	}
}

package slots

import (
	"context"
	"strings"
	"testing"
	"time"
)

// newSlots returns initialized slots.
func newSlots(limit, queueCap int, maxWait time.Duration) *Slots {
	s := &Slots{Owner: "test"}
	s.Init(limit, queueCap, maxWait, nil, Keys{})
	return s
}

// checkCounts fails the test unless s has exactly active slots held and
// queued callers waiting.
func checkCounts(t *testing.T, s *Slots, active, queued int) {
	t.Helper()
	if a, q := s.Active(), s.Queued(); a != active || q != queued {
		t.Fatalf("Active, Queued = %d, %d; want %d, %d", a, q, active, queued)
	}
}

func TestWaitList(t *testing.T) {
	// order lists the waiters from head to tail and checks the back links.
	order := func(l *waitList, ids map[*waiter]string) string {
		var s []string
		var prev *waiter
		for w := l.head; w != nil; w = w.next {
			if w.prev != prev {
				t.Fatalf("broken prev link at %s", ids[w])
			}
			s = append(s, ids[w])
			prev = w
		}
		if l.tail != prev {
			t.Fatalf("tail is not the last waiter")
		}
		if l.len != len(s) {
			t.Fatalf("len = %d; list holds %d", l.len, len(s))
		}
		return strings.Join(s, "")
	}
	tests := []struct {
		remove string
		want   string
	}{
		{"a", "bcd"}, {"b", "acd"}, {"d", "abc"}, {"ad", "bc"}, {"abcd", ""}, {"cbda", ""},
	}
	for _, tt := range tests {
		var l waitList
		ws := map[string]*waiter{}
		ids := map[*waiter]string{}
		for _, id := range "abcd" {
			w := &waiter{}
			ws[string(id)], ids[w] = w, string(id)
			l.pushBack(w)
		}
		for _, id := range tt.remove {
			l.remove(ws[string(id)])
		}
		if got := order(&l, ids); got != tt.want {
			t.Errorf("remove %q: list %q; want %q", tt.remove, got, tt.want)
		}
	}
}

// enqueue puts a waiter in b's queue as acquireSlow would, without a
// goroutine, for the white-box race tests.
func enqueue(b *Slots) *waiter {
	w := &waiter{ready: make(chan struct{}, 1), line: &b.all.lines[1]}
	b.mu.Lock()
	b.push(w)
	b.mu.Unlock()
	return w
}

// TestGiveUpRace checks the settlement of the race between a waiter giving
// up and a release handing it the slot: the release wins here (it took the
// mutex first), and the waiter then acts on its ctx or its MaxWait.
func TestGiveUpRace(t *testing.T) {
	t.Run("ctx: a granted waiter passes the slot on", func(t *testing.T) {
		b := newSlots(1, Unbounded, 0)
		b.Acquire(context.Background())
		w1, w2 := enqueue(b), enqueue(b)
		b.Release(Held{}) // hands the slot to w1
		if !w1.granted || w2.granted {
			t.Fatal("release did not hand the slot to the oldest waiter")
		}
		checkCounts(t, b, 1, 1)
		b.abandon(w1) // w1's ctx ended as the slot arrived
		if !w2.granted {
			t.Fatal("abandoned slot not passed to the next waiter")
		}
		checkCounts(t, b, 1, 0)
		b.abandon(w2) // no one left: the slot is freed
		checkCounts(t, b, 0, 0)
	})
	t.Run("ctx: an ungranted waiter is unlinked", func(t *testing.T) {
		b := newSlots(1, Unbounded, 0)
		b.Acquire(context.Background())
		w1, w2 := enqueue(b), enqueue(b)
		b.abandon(w1)
		checkCounts(t, b, 1, 1)
		b.Release(Held{})
		if w1.granted || !w2.granted {
			t.Fatal("a waiter that left was handed the slot")
		}
		b.Release(Held{})
		checkCounts(t, b, 0, 0)
	})
	t.Run("MaxWait: a granted waiter keeps the slot", func(t *testing.T) {
		b := newSlots(1, Unbounded, time.Second)
		b.Acquire(context.Background())
		w1, w2 := enqueue(b), enqueue(b)
		b.Release(Held{})
		if b.expire(w1) != Admitted {
			t.Fatal("expire of a granted waiter reported no slot")
		}
		checkCounts(t, b, 1, 1)
		if w2.granted {
			t.Fatal("expired-but-granted waiter passed its slot on")
		}
		if b.expire(w2) != RejectedWaitTimeout {
			t.Fatal("expire of an ungranted waiter reported a slot")
		}
		checkCounts(t, b, 1, 0)
		b.Release(Held{})
		checkCounts(t, b, 0, 0)
	})
	t.Run("wait: granted and ctx done returns ctx.Err and frees the slot", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for range 100 { // select picks either ready case: both must end the same
			b := newSlots(1, Unbounded, 0)
			b.Acquire(context.Background())
			w := enqueue(b)
			b.Release(Held{})
			if o, _, err := b.wait(ctx, w, b.maxWait); o != CtxDone || err != context.Canceled {
				t.Fatalf("wait = %v, %v; want CtxDone, context.Canceled", o, err)
			}
			checkCounts(t, b, 0, 0)
		}
	})
}

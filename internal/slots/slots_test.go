package slots

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// caller runs Acquire in goroutines that hold their slot until released.
// It is used inside synctest bubbles, where synctest.Wait makes "admitted
// and blocked" exact.
type caller struct {
	s     *Slots
	mu    sync.Mutex
	order []string // names admitted, in order
	gate  map[string]chan struct{}
	outs  map[string]Outcome
	done  map[string]chan struct{}
}

func newCaller(s *Slots) *caller {
	return &caller{s: s, gate: map[string]chan struct{}{}, outs: map[string]Outcome{}, done: map[string]chan struct{}{}}
}

// start makes a caller named name acquire with ctx and, once admitted, hold
// its slot until release(name); it returns once every goroutine is blocked.
func (c *caller) start(ctx context.Context, name string) {
	gate, done := make(chan struct{}), make(chan struct{})
	c.mu.Lock()
	c.gate[name], c.done[name] = gate, done
	c.mu.Unlock()
	go func() {
		defer close(done)
		o, h, _ := c.s.Acquire(ctx)
		c.mu.Lock()
		c.outs[name] = o
		if o == Admitted {
			c.order = append(c.order, name)
		}
		c.mu.Unlock()
		if o == Admitted {
			<-gate
			c.s.Release(h)
		}
	}()
	synctest.Wait()
}

func (c *caller) release(name string) {
	close(c.gate[name])
	synctest.Wait()
}

// admitted lists the callers admitted so far, in the order they woke up
// with their slot; callers granted at the same moment (by SetLimit) wake in
// any order, so those are sorted.
func (c *caller) admitted(sortFrom int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := slices.Clone(c.order)
	slices.Sort(o[min(sortFrom, len(o)):])
	return strings.Join(o, ",")
}

func (c *caller) outcome(name string) Outcome {
	<-c.done[name]
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outs[name]
}

func TestAcquireOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlots(1, 1, time.Second)
		c := newCaller(s)
		c.start(context.Background(), "h")
		c.start(context.Background(), "w")
		checkCounts(t, s, 1, 1)
		if o, _, err := s.Acquire(context.Background()); o != RejectedFull || err != nil {
			t.Fatalf("Acquire on a full queue = %v, %v; want RejectedFull, nil", o, err)
		}
		canceled, cancel := context.WithCancel(context.Background())
		cancel()
		if o, _, err := s.Acquire(canceled); o != CtxDone || err != context.Canceled {
			t.Fatalf("Acquire with a done ctx = %v, %v; want CtxDone, Canceled", o, err)
		}
		time.Sleep(time.Second)
		if o := c.outcome("w"); o != RejectedWaitTimeout {
			t.Fatalf("waiter outcome %v; want RejectedWaitTimeout", o)
		}
		checkCounts(t, s, 1, 0)
		c.release("h")
		checkCounts(t, s, 0, 0)
	})
}

func TestReleaseTwicePanics(t *testing.T) {
	s := newSlots(2, 0, 0)
	defer func() {
		if r := recover(); r != "test: slot released twice" {
			t.Errorf("panic = %v", r)
		}
		checkCounts(t, s, 0, 0)
	}()
	s.Release(Held{})
}

func TestNoAllocs(t *testing.T) {
	s := newSlots(1, 0, 0)
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		if o, _, _ := s.Acquire(ctx); o == Admitted {
			s.Release(Held{})
		}
	}); n != 0 {
		t.Errorf("Acquire and Release: %v allocs; want 0", n)
	}
	s.Acquire(ctx)
	defer s.Release(Held{})
	if n := testing.AllocsPerRun(100, func() { s.Acquire(ctx) }); n != 0 {
		t.Errorf("rejected Acquire: %v allocs; want 0", n)
	}
}

// TestSetLimitDown lowers the limit while every slot is busy: nothing is
// revoked, nobody is admitted until fewer than the new limit are held (the
// releases free their slots instead of handing them on), then hand-off
// resumes in FIFO order.
func TestSetLimitDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlots(4, Unbounded, 0)
		c := newCaller(s)
		for i := range 4 {
			c.start(context.Background(), fmt.Sprint("h", i))
		}
		c.start(context.Background(), "w1")
		c.start(context.Background(), "w2")
		checkCounts(t, s, 4, 2)
		s.SetLimit(2)
		if s.Limit() != 2 {
			t.Fatalf("Limit() = %d; want 2", s.Limit())
		}
		checkCounts(t, s, 4, 2) // nothing revoked
		// A newcomer queues behind the waiters, even on the fast path.
		c.start(context.Background(), "w3")
		checkCounts(t, s, 4, 3)
		c.release("h0")
		checkCounts(t, s, 3, 3) // freed, not handed on: 3 > 2 still
		c.release("h1")
		checkCounts(t, s, 2, 3) // freed: now at the limit, nobody admitted
		if got := c.admitted(1 << 30); got != "h0,h1,h2,h3" {
			t.Fatalf("admitted %q", got)
		}
		c.release("h2") // below the limit: hand-off resumes
		checkCounts(t, s, 2, 2)
		c.release("h3")
		checkCounts(t, s, 2, 1)
		if got := c.admitted(4); got != "h0,h1,h2,h3,w1,w2" {
			t.Fatalf("admitted %q; want the waiters in order", got)
		}
		c.release("w1")
		c.release("w2")
		c.release("w3")
		checkCounts(t, s, 0, 0)
		if got := c.admitted(1 << 30); got != "h0,h1,h2,h3,w1,w2,w3" {
			t.Fatalf("admitted %q", got)
		}
	})
}

// TestSetLimitDownNoQueue lowers the limit with nobody waiting: the fast
// path admits nobody until fewer than the new limit are held.
func TestSetLimitDownNoQueue(t *testing.T) {
	s := newSlots(3, 0, 0)
	ctx := context.Background()
	for range 3 {
		if o, _, _ := s.Acquire(ctx); o != Admitted {
			t.Fatal("not admitted")
		}
	}
	s.SetLimit(1)
	for range 2 {
		if o, _, _ := s.Acquire(ctx); o != RejectedFull {
			t.Fatalf("Acquire = %v above the lowered limit", o)
		}
		s.Release(Held{})
	}
	checkCounts(t, s, 1, 0)
	if o, _, _ := s.Acquire(ctx); o != RejectedFull {
		t.Fatalf("Acquire = %v at the lowered limit", o)
	}
	s.Release(Held{})
	if o, _, _ := s.Acquire(ctx); o != Admitted {
		t.Fatalf("Acquire = %v below the lowered limit", o)
	}
	s.Release(Held{})
	checkCounts(t, s, 0, 0)
}

// TestSetLimitUp raises the limit while callers wait: the new slots go to
// the oldest waiters, in order, at once.
func TestSetLimitUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlots(1, Unbounded, 0)
		c := newCaller(s)
		for _, n := range []string{"h", "a", "b", "c", "d"} {
			c.start(context.Background(), n)
		}
		checkCounts(t, s, 1, 4)
		s.SetLimit(3)
		synctest.Wait()
		checkCounts(t, s, 3, 2)
		if got := c.admitted(1); got != "h,a,b" {
			t.Fatalf("admitted %q; want h,a,b", got)
		}
		s.SetLimit(10)
		synctest.Wait()
		checkCounts(t, s, 5, 0)
		if got := c.admitted(1); got != "h,a,b,c,d" {
			t.Fatalf("admitted %q; want h,a,b,c,d", got)
		}
		// With room to spare, newcomers take the fast path.
		c.start(context.Background(), "e")
		checkCounts(t, s, 6, 0)
		for _, n := range []string{"h", "a", "b", "c", "d", "e"} {
			c.release(n)
		}
		checkCounts(t, s, 0, 0)
	})
}

// TestSetLimitDownAbandon: a granted waiter that gives up passes its slot on
// only if the limit allows.
func TestSetLimitDownAbandon(t *testing.T) {
	s := newSlots(2, Unbounded, 0)
	s.Acquire(context.Background())
	s.Acquire(context.Background())
	w1, w2 := enqueue(s), enqueue(s)
	s.Release(Held{}) // active 2 <= limit 2: handed to w1
	if !w1.granted {
		t.Fatal("not handed to w1")
	}
	s.SetLimit(1)
	s.abandon(w1) // active 2 > limit 1: freed, not passed to w2
	if w2.granted {
		t.Fatal("abandoned slot passed on above the limit")
	}
	checkCounts(t, s, 1, 1)
	s.Release(Held{}) // active 1 <= 1: handed to w2
	if !w2.granted {
		t.Fatal("not handed to w2")
	}
	s.Release(Held{})
	checkCounts(t, s, 0, 0)
}

// TestSetLimitConcurrent changes the limit while many goroutines acquire
// and release in real time, and checks the counts settle to zero.
func TestSetLimitConcurrent(t *testing.T) {
	s := newSlots(4, 8, 100*time.Microsecond)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s.SetLimit(1 + i%5)
			runtime.Gosched()
		}
	})
	var users sync.WaitGroup
	for range 16 {
		users.Go(func() {
			for range 500 {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
				if o, _, _ := s.Acquire(ctx); o == Admitted {
					runtime.Gosched()
					s.Release(Held{})
				}
				cancel()
			}
		})
	}
	users.Wait()
	close(stop)
	wg.Wait()
	checkCounts(t, s, 0, 0)
}

// BenchmarkUnlink measures the queue operations of a waiter giving up at
// the back of a queue of n: O(1), the same for every n.
func BenchmarkUnlink(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("queued=%d", n), func(b *testing.B) {
			s := newSlots(1, Unbounded, 0)
			s.Acquire(context.Background())
			for range n {
				enqueue(s)
			}
			w := &waiter{ready: make(chan struct{}, 1), line: &s.all.lines[1]}
			b.ReportAllocs()
			for b.Loop() {
				s.mu.Lock()
				s.push(w)
				s.mu.Unlock()
				s.abandon(w)
			}
		})
	}
}

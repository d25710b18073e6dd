package stage_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/internal/stage"
)

// TestAnswerClockWatch: a watched call counts as answered from Answered
// until the next attempt's Start or Unwatch, once however often Answered
// is called; one watch at a time; every change notified.
func TestAnswerClockWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var notified int
		var n stage.AnswerCount
		n.Notify = func() { notified++ }
		check := func(step string, count, notes int) {
			t.Helper()
			if n.Load() != count || notified != notes {
				t.Fatalf("%s: count %d, notified %d times; want %d, %d", step, n.Load(), notified, count, notes)
			}
		}
		var c stage.AnswerClock
		if !c.Watch(&n) {
			t.Fatal("Watch of a free clock: false")
		}
		var other stage.AnswerCount
		if c.Watch(&other) {
			t.Fatal("a second Watch: true; want false while the first is on")
		}
		c.Start(time.Now())
		check("watched, awaiting", 0, 0)
		time.Sleep(20 * time.Millisecond)
		c.Answered()
		check("answered", 1, 1)
		time.Sleep(time.Second)
		c.Answered() // a second mark changes nothing
		check("answered twice", 1, 1)
		if d := c.Latency(time.Now()); d != 20*time.Millisecond {
			t.Fatalf("Latency %v; want the answer's 20ms", d)
		}
		c.Start(time.Now()) // another attempt: awaiting again
		check("next attempt", 0, 2)
		c.Answered()
		check("next attempt answered", 1, 3)
		if !c.Unwatch() {
			t.Fatal("Unwatch of an answered call: false")
		}
		check("unwatched", 0, 4)
		if c.Unwatch() {
			t.Fatal("a second Unwatch: true")
		}
		c.Answered() // not watched: not counted
		check("answered unwatched", 0, 4)
		if other.Load() != 0 {
			t.Fatalf("the refused watch counted %d", other.Load())
		}
		// Unwatched before its answer: nothing to take back.
		if !c.Watch(&n) {
			t.Fatal("Watch after Unwatch: false")
		}
		c.Start(time.Now())
		if c.Unwatch() {
			t.Fatal("Unwatch of an unanswered call: true")
		}
		check("unwatched unanswered", 0, 4)
		var nilClock *stage.AnswerClock
		if nilClock.Watch(&n) {
			t.Fatal("Watch of a nil clock: true")
		}
		nilClock.Answered()
		if stage.AnswerClockFrom(context.Background()).Watch(&n) {
			t.Fatal("Watch of the clock of a context without one: true")
		}
	})
}

// TestAnswerCountConcurrent: many calls watched, answered (on another
// goroutine, as fn may), retried and unwatched at once leave the count at
// 0. Run with -race.
func TestAnswerCountConcurrent(t *testing.T) {
	var n stage.AnswerCount
	var notes atomic.Int64
	n.Notify = func() { notes.Add(1) }
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				var c stage.AnswerClock
				if !c.Watch(&n) {
					t.Error("Watch of a fresh clock: false")
					return
				}
				for attempt := range 1 + (g+i)%3 {
					c.Start(time.Now())
					if (i+attempt)%4 != 0 {
						done := make(chan struct{})
						go func() { c.Answered(); close(done) }()
						<-done
					}
				}
				c.Unwatch()
			}
		})
	}
	wg.Wait()
	if n.Load() != 0 {
		t.Fatalf("count %d after every call ended; want 0", n.Load())
	}
	if notes.Load() == 0 {
		t.Fatal("never notified")
	}
}

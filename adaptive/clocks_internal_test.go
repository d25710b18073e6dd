package adaptive

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// A limiter used alternately outside and inside bubbles jumps about 26
// years back at each entry (a bubble's clock starts in 2000) and as far
// forward at each exit. The clock's shift must stay bounded (it overflowed
// int64 at the 11th round when only backward jumps were rebased), and
// windows must go on closing.
func TestClockShiftStaysBounded(t *testing.T) {
	l, err := New(Config{ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	calls := func() {
		for range 12 {
			l.Execute(context.Background(), func(context.Context) error { time.Sleep(time.Millisecond); return nil })
		}
	}
	const year = 365 * 24 * time.Hour
	for i := range 14 {
		calls() // real clock
		synctest.Test(t, func(t *testing.T) { calls() })
		if s := time.Duration(l.shift.Load()); s < -50*year || s > 50*year {
			t.Fatalf("round %d: shift %.1f years; want it bounded", i+1, float64(s)/float64(year))
		}
	}
	l.mu.Lock()
	before := l.ctl.lastNow
	l.mu.Unlock()
	for range 5 {
		calls()
		time.Sleep(60 * time.Millisecond) // real time: a window is 50 ms
	}
	l.mu.Lock()
	after := l.ctl.lastNow
	l.mu.Unlock()
	if after <= before {
		t.Errorf("no window closed on the real clock after the rounds: lastNow %d -> %d", before, after)
	}
}

package adaptive_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
)

// drive runs workers closed-loop callers whose calls take lat() for dur, and
// reads the admission limit every 100 ms: how many readings found it below
// the learned limit (a probe's cap).
func drive(l *adaptive.Limiter, workers int, dur time.Duration, lat func() time.Duration) (capped, readings int) {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				l.Execute(ctx, func(context.Context) error { time.Sleep(lat()); return nil })
			}
		})
	}
	for range int(dur / (100 * time.Millisecond)) {
		time.Sleep(100 * time.Millisecond)
		readings++
		if l.Admission() < l.Limit() {
			capped++
		}
	}
	stop()
	wg.Wait()
	return capped, readings
}

// A dependency slower than the 1 s a stalled probe is given (an LLM API, a
// batch endpoint) under load: the probe must wait for its first answers and
// measure it.
func TestSlowDependencyIsMeasured(t *testing.T) {
	for _, lat := range []time.Duration{1500 * time.Millisecond, 5 * time.Second} {
		synctest.Test(t, func(t *testing.T) {
			l := mustNew(t, adaptive.Config{MaxQueue: adaptive.Unbounded})
			capped, n := drive(l, 12, 120*time.Second, func() time.Duration { return lat })
			st := l.State()
			if !st.Measured || st.NoLoad != lat || capped*4 > n {
				t.Errorf("latency %v, 12 callers, 120 s: %+v, admission capped in %d of %d readings; want noLoad %v measured, capped in at most a quarter",
					lat, st, capped, n, lat)
			}
		})
	}
}

// The base latency rises from 20 ms to 1.5 s under load (12 callers at a
// MaxLimit of 12: they reach the limit): the early probe re-measures it and
// the limit climbs back to the callers' number.
func TestDriftToSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{MaxQueue: adaptive.Unbounded, MaxLimit: 12})
		var lat atomic.Int64
		lat.Store(int64(20 * time.Millisecond))
		f := func() time.Duration { return time.Duration(lat.Load()) }
		drive(l, 12, 10*time.Second, f)
		lat.Store(int64(1500 * time.Millisecond))
		drive(l, 12, 180*time.Second, f)
		if st := l.State(); st.NoLoad != 1500*time.Millisecond || l.Limit() < 12 {
			t.Errorf("180 s after a drift to 1.5 s: %+v, Limit %d; want noLoad 1.5s and a limit of at least the 12 callers", st, l.Limit())
		}
	})
}

// Low traffic with a tail (1 call in 8 takes 30 times the others), then 40
// callers at a dependency that serves 5 at once, the tail unchanged. The
// probe's median stays the no-load latency, the quiet windows' means make the
// no-load mean (92.5 ms), and under load the limit settles near Tolerance x 5
// + 1, not far above the capacity.
func TestTailUnderLoadSettlesNearCapacity(t *testing.T) {
	// synctest runs the goroutines of an instant in varying orders, and
	// under this tail the limit wanders a few steps (a window closing on a
	// burst of the slow calls, a probe's end, a probe whose 10 to 13 calls
	// held two or three slow ones). The median of five runs' medians is
	// where the controller settles. The bound catches a controller that
	// settles far above the capacity (Tolerance 10: 49), not a step or two
	// (one run's median: 6 to 8 in 20 runs).
	var medians []int
	for range 5 {
		synctest.Test(t, func(t *testing.T) { medians = append(medians, tailUnderLoad(t)) })
	}
	slices.Sort(medians)
	// Settles at Tolerance x 5 + 1 = 7.25; allow the hysteresis and the
	// wander of a few steps.
	if got := medians[len(medians)/2]; got > 12 {
		t.Errorf("the last 10 s of 40 callers at a capacity of 5: median Limit %d (medians of 5 runs %v); want at most 12", got, medians)
	}
}

// tailUnderLoad runs TestTailUnderLoadSettlesNearCapacity's scenario in a
// bubble and returns the median of the limit read every 100 ms over the
// last 10 s.
func tailUnderLoad(t *testing.T) int {
	l := mustNew(t, adaptive.Config{MaxQueue: adaptive.Unbounded})
	var inflight atomic.Int64
	call := func(d time.Duration) {
		l.Execute(context.Background(), func(context.Context) error {
			n := inflight.Add(1)
			defer inflight.Add(-1)
			time.Sleep(d * time.Duration(max(n, 5)) / 5) // capacity 5
			return nil
		})
	}
	for i := range 240 { // 60 s at 4 calls/s
		d := 20 * time.Millisecond
		if i%8 == 7 {
			d = 600 * time.Millisecond
		}
		call(d)
		time.Sleep(250 * time.Millisecond)
		if st := l.State(); i > 40 && st.Measured && st.NoLoad != 20*time.Millisecond {
			t.Fatalf("call %d of low traffic: %+v; want noLoad to stay the median, 20ms", i, st)
		}
	}
	ctx, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
	// One in 8 of the calls in the order they are made, not of each
	// caller's: 40 callers each cycling through 7 fast calls and a slow one
	// fall into step behind the queue, and then a run of consecutive calls
	// (a probe's) are nearly all slow.
	var seq atomic.Int64
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			for ctx.Err() == nil {
				d := 20 * time.Millisecond
				if seq.Add(1)%8 == 7 {
					d = 600 * time.Millisecond
				}
				call(d)
			}
		})
	}
	var limits []int
	wg.Go(func() {
		time.Sleep(10 * time.Second)
		for ctx.Err() == nil {
			limits = append(limits, l.Limit())
			time.Sleep(100 * time.Millisecond)
		}
	})
	wg.Wait()
	slices.Sort(limits)
	return limits[len(limits)/2]
}

package adaptive_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/policy"
)

// burst starts n calls of d at once and returns how many were rejected.
func burst(l *adaptive.Limiter, n int, d time.Duration) int {
	var rejected atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			err := l.Execute(context.Background(), func(context.Context) error { time.Sleep(d); return nil })
			if errors.Is(err, policy.ErrRejected) {
				rejected.Add(1)
			}
		})
	}
	wg.Wait()
	return int(rejected.Load())
}

// Low steady traffic (4 calls a second of 20 ms) takes 2.5 s to give a probe
// its 10 samples. The probe must still end measured, and quiet windows must
// measure the no-load latency without a probe's cap, so that a burst later
// finds the learned limit, not the cap of 3.
func TestLowTrafficMeasuresWithoutCapping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{})
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() {
			for ctx.Err() == nil {
				l.Execute(ctx, func(context.Context) error { time.Sleep(20 * time.Millisecond); return nil })
				time.Sleep(230 * time.Millisecond)
			}
		})
		capped := 0
		for range 600 {
			time.Sleep(100 * time.Millisecond)
			if l.Admission() < l.Limit() {
				capped++
			}
		}
		st := l.State()
		if !st.Measured || st.NoLoad != 20*time.Millisecond {
			t.Errorf("after 60 s at 4 calls/s: %+v; want noLoad 20ms measured", st)
		}
		// The first probe takes its 2.5 s; no other may follow, since the
		// quiet windows measure the no-load latency themselves.
		if st.Quiet < 10 {
			t.Errorf("%d quiet windows measured noLoad; want at least 10 in 60 s", st.Quiet)
		}
		if st.Probes != 1 || capped > 30 {
			t.Errorf("%d probes, admission capped in %d of 600 readings; want 1 probe, capped at most 30 times (the first 3 s)", st.Probes, capped)
		}
		if got := burst(l, 15, 20*time.Millisecond); got != 0 {
			t.Errorf("a burst of 15 with Limit %d: %d rejected; want 0", l.Limit(), got)
		}
		stop()
		wg.Wait()
	})
}

// A streamed answer is sampled at its headers but holds its slot for the
// whole body: a probe's calls then progress slowly (each slot frees only
// after the body), but surely. The probe must end measured rather than be
// abandoned again and again with admission at 3.
func TestStreamedAnswersEndTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{MaxQueue: adaptive.Unbounded})
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for ctx.Err() == nil {
					p, err := l.Acquire(ctx)
					if err != nil {
						continue
					}
					time.Sleep(20 * time.Millisecond) // the headers
					l.Observe(20*time.Millisecond, false)
					time.Sleep(480 * time.Millisecond) // the body
					p.Release()
				}
			})
		}
		capped := 0
		for range 600 {
			time.Sleep(100 * time.Millisecond)
			if l.Admission() < l.Limit() {
				capped++
			}
		}
		stop()
		wg.Wait()
		st := l.State()
		if !st.Measured || st.NoLoad != 20*time.Millisecond {
			t.Errorf("after 60 s of streams: %+v; want noLoad 20ms measured", st)
		}
		// A probe of 10 samples at 3 in flight, each slot held 500 ms, takes
		// about 2 s: the first and one every ProbeInterval (30 s).
		if capped > 100 {
			t.Errorf("admission capped in %d of 600 readings, %d probes; want at most 100", capped, st.Probes)
		}
	})
}

// A probe that starts as traffic stops must not hold admission at its cap
// through the idle period: the next burst would meet a limit of 3. The
// burst's first admission finds the probe stale (no progress for 1 s,
// nothing in flight) and abandons it.
func TestIdleProbeIsAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{})
		if !l.State().Probing || l.Admission() != 3 {
			t.Fatalf("new limiter: %+v, admission %d; want its first probe at 3", l.State(), l.Admission())
		}
		time.Sleep(10 * time.Second) // no call at all
		if got := burst(l, 15, 20*time.Millisecond); got != 0 {
			t.Errorf("a burst of 15 after idle: %d rejected; want 0", got)
		}
		if st := l.State(); st.Probing || l.Admission() != 20 {
			t.Errorf("after the burst: %+v, admission %d; want the probe abandoned, admission 20", st, l.Admission())
		}
	})
}

// A limiter is built in the testing/synctest bubble that uses it, and
// learns there; each bubble's clock starts at the same instant.
func TestLimiterInEachBubble(t *testing.T) {
	for i, lat := range []time.Duration{5 * time.Millisecond, 40 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			l := mustNew(t, adaptive.Config{})
			for range 600 {
				l.Execute(context.Background(), func(context.Context) error { time.Sleep(lat); return nil })
				time.Sleep(50 * time.Millisecond)
			}
			if st := l.State(); !st.Measured || st.Base < lat*9/10 || st.Base > lat*11/10 || st.Probing {
				t.Errorf("bubble %d, calls of %v one at a time: %+v; want a no-load mean within 10%% of %v, no probe running", i+1, lat, st, lat)
			}
		})
	}
}

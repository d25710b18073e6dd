package adaptive_test

// Congestion that shows as a tail must lower the limit as congestion that
// slows every call does: a cap of each sample at 3 x noLoad must not hide
// a LIFO server's starving calls (a limit of 37 against a capacity of 10,
// with 5% of calls timing out).
import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/policy"
)

// lifoServer: C workers, waiting calls served newest first (adaptive LIFO, as
// many servers do under overload). Mean latency obeys Little's law as FIFO,
// but most calls are fast and the oldest starve until their deadline.
type lifoServer struct {
	mu    sync.Mutex
	free  int
	stack []chan struct{}
	base  time.Duration
}

func (s *lifoServer) call(ctx context.Context) error {
	s.mu.Lock()
	if s.free > 0 {
		s.free--
		s.mu.Unlock()
	} else {
		ch := make(chan struct{}, 1)
		s.stack = append(s.stack, ch)
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			s.mu.Lock()
			if i := slices.Index(s.stack, ch); i >= 0 {
				s.stack = slices.Delete(s.stack, i, i+1)
				s.mu.Unlock()
				return ctx.Err()
			}
			s.mu.Unlock()
			<-ch // granted meanwhile: give the worker back
			s.release()
			return ctx.Err()
		}
	}
	t := time.NewTimer(s.base)
	defer t.Stop()
	select {
	case <-t.C:
		s.release()
		return nil
	case <-ctx.Done():
		s.release()
		return ctx.Err()
	}
}

func (s *lifoServer) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.stack); n > 0 {
		ch := s.stack[n-1]
		s.stack = s.stack[:n-1]
		ch <- struct{}{}
		return
	}
	s.free++
}

// fifo-ish fluid dependency with a hook for the latency at n in flight.
type fluid struct {
	inflight atomic.Int64
	lat      func(n int64) time.Duration
}

func (f *fluid) call(ctx context.Context) error {
	n := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	t := time.NewTimer(f.lat(n))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type result struct {
	ok, timeouts, rejected int64
	limitMean              float64
	limitMax, limitMin     int
	capped, readings       int
	p50, p99               time.Duration
}

func run(l *adaptive.Limiter, workers int, dur, deadline time.Duration, call func(context.Context) error, measureFrom time.Duration) result {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ok, to, rej atomic.Int64
	var measuring atomic.Bool
	var mu sync.Mutex
	var lats []time.Duration
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				c, cancel := ctx, context.CancelFunc(func() {})
				if deadline > 0 {
					c, cancel = context.WithTimeout(ctx, deadline)
				}
				start := time.Now()
				err := l.Execute(c, call)
				cancel()
				m := measuring.Load()
				switch {
				case err == nil:
					if m {
						ok.Add(1)
						mu.Lock()
						lats = append(lats, time.Since(start))
						mu.Unlock()
					}
				case errors.Is(err, policy.ErrRejected):
					if m {
						rej.Add(1)
					}
					time.Sleep(5 * time.Millisecond)
				case errors.Is(err, context.DeadlineExceeded):
					if m {
						to.Add(1)
					}
				default:
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	var r result
	r.limitMin = 1 << 30
	sum := 0
	for t := time.Duration(0); t < dur; t += 100 * time.Millisecond {
		time.Sleep(100 * time.Millisecond)
		if t >= measureFrom {
			measuring.Store(true)
			lim := l.Limit()
			sum += lim
			r.readings++
			r.limitMax = max(r.limitMax, lim)
			r.limitMin = min(r.limitMin, lim)
			if l.Admission() < lim {
				r.capped++
			}
		}
	}
	stop()
	wg.Wait()
	r.ok, r.timeouts, r.rejected = ok.Load(), to.Load(), rej.Load()
	r.limitMean = float64(sum) / float64(r.readings)
	slices.Sort(lats)
	if len(lats) > 0 {
		r.p50 = lats[len(lats)/2]
		r.p99 = lats[len(lats)*99/100]
	}
	return r
}

func report(t *testing.T, name string, l *adaptive.Limiter, r result, secs float64) {
	t.Logf("%-14s limit mean %.1f [%d..%d]  ok/s %.0f  timeouts/s %.1f (%.1f%% of answered)  rejected/s %.0f  p50 %v p99 %v  capped %d/%d  state %+v",
		name, r.limitMean, r.limitMin, r.limitMax, float64(r.ok)/secs, float64(r.timeouts)/secs,
		100*float64(r.timeouts)/float64(max(1, r.ok+r.timeouts)), float64(r.rejected)/secs, r.p50, r.p99, r.capped, r.readings, l.State())
}

func TestCongestionAsATail(t *testing.T) {
	// The longest simulations of the package, each in a bubble of its own:
	// in parallel, under -race on 2 cores, they take both.
	t.Parallel()
	const base = 20 * time.Millisecond
	const C = 10
	for _, tc := range []struct {
		name     string
		workers  int
		deadline time.Duration
		call     func() func(context.Context) error
	}{
		// FIFO fluid: everyone slower by n/C (control).
		{"fifo", 60, time.Second, func() func(context.Context) error {
			f := &fluid{lat: func(n int64) time.Duration { return base * time.Duration(max(n, C)) / C }}
			return f.call
		}},
		// LIFO server: most fast, the oldest starve to the 1 s deadline.
		{"lifo", 60, time.Second, func() func(context.Context) error {
			s := &lifoServer{free: C, base: base}
			return s.call
		}},
		// Over capacity, half the calls take 10x.
		{"bimodal50", 60, time.Second, func() func(context.Context) error {
			f := &fluid{lat: func(n int64) time.Duration {
				if n > C && rand.IntN(2) == 0 {
					return 10 * base
				}
				return base
			}}
			return f.call
		}},
		// Over capacity, the share (n-C)/n beyond capacity takes 10x.
		{"overflow10x", 60, time.Second, func() func(context.Context) error {
			f := &fluid{lat: func(n int64) time.Duration {
				if n > C && rand.Int64N(n) >= C {
					return 10 * base
				}
				return base
			}}
			return f.call
		}},
		// Over capacity, 10% of calls take 20x (a queue behind a lock / GC).
		{"tail10pct", 60, time.Second, func() func(context.Context) error {
			f := &fluid{lat: func(n int64) time.Duration {
				if n > C && rand.IntN(10) == 0 {
					return 20 * base * time.Duration(n) / C
				}
				return base
			}}
			return f.call
		}},
		// FIFO, 200 callers, 100 ms deadline: timeouts as samples.
		{"timeouts", 200, 100 * time.Millisecond, func() func(context.Context) error {
			f := &fluid{lat: func(n int64) time.Duration { return base * time.Duration(max(n, C)) / C }}
			return f.call
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.name != "lifo" && tc.name != "tail10pct" {
				t.Skip("the two cases of congestion as a tail run in -short; the others are controls")
			}
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				l := mustNew(t, adaptive.Config{})
				r := run(l, tc.workers, 60*time.Second, tc.deadline, tc.call(), 20*time.Second)
				report(t, tc.name, l, r, 40)
				// Capacity 10: the limit settles near Tolerance x 10 + 1
				// (13.5) or below; a limit far above it means the
				// congestion went unseen.
				if timedOut := float64(r.timeouts) / float64(max(1, r.ok+r.timeouts)); r.limitMean > 20 || timedOut > 0.01 {
					t.Errorf("%s: limit mean %.1f, %.1f%% of answered calls timed out; want at most 20 and 1%%", tc.name, r.limitMean, 100*timedOut)
				}
			})
		})
	}
}

// The base latency doubles (20 -> 40 ms, capacity 10) at t = 20 s: the
// probe re-measures it and the limit stays near 13.5.
func TestCongestionBaseDoubles(t *testing.T) {
	t.Parallel() // a long simulation in a bubble of its own
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{})
		var b atomic.Int64
		b.Store(int64(20 * time.Millisecond))
		f := &fluid{lat: func(n int64) time.Duration { return time.Duration(b.Load()) * time.Duration(max(n, 10)) / 10 }}
		r := run(l, 60, 20*time.Second, time.Second, f.call, 10*time.Second)
		report(t, "before", l, r, 10)
		b.Store(int64(40 * time.Millisecond))
		r = run(l, 60, 60*time.Second, time.Second, f.call, 20*time.Second)
		report(t, "doubled", l, r, 40)
		if st := l.State(); st.NoLoad != 40*time.Millisecond || r.limitMean < 11 || r.limitMean > 16 {
			t.Errorf("after the base latency doubled: %+v, limit mean %.1f; want noLoad 40ms, limit mean in [11, 16]", st, r.limitMean)
		}
	})
}

package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/policy"
)

// A latency shape: draw returns one call's latency, or a negative value for
// a call that hangs until its caller's deadline.
type latencyShape struct {
	name string
	draw func(r *rand.Rand) time.Duration
}

var healthyShapes = []latencyShape{
	{"bimodal", func(r *rand.Rand) time.Duration {
		if r.IntN(10) == 0 {
			return 500 * time.Millisecond
		}
		return 5 * time.Millisecond
	}},
	{"lognormal", func(r *rand.Rand) time.Duration {
		return time.Duration(float64(20*time.Millisecond) * math.Exp(r.NormFloat64()))
	}},
	{"hung1pct", hungShape(100)},
	{"hung5pct", hungShape(20)},
}

// hungShape: 20 ms calls, one in every n hung.
func hungShape(n int) func(r *rand.Rand) time.Duration {
	return func(r *rand.Rand) time.Duration {
		if r.IntN(n) == 0 {
			return -1
		}
		return 20 * time.Millisecond
	}
}

type openLoopResult struct {
	offered, rejected  int64
	limitMin, limitMax int
	limitMean          float64
	maxActive          int
}

// openLoop offers a healthy dependency (latency independent of
// concurrency, no capacity limit) rate calls a second at fixed intervals
// for dur, each call with a deadline, and counts from measureFrom on.
func openLoop(l *adaptive.Limiter, shape latencyShape, seed uint64, rate int, dur, measureFrom, deadline time.Duration) openLoopResult {
	r := rand.New(rand.NewPCG(seed, 7))
	every := time.Second / time.Duration(rate)
	var wg sync.WaitGroup
	var offered, rejected atomic.Int64
	var res openLoopResult
	res.limitMin = math.MaxInt
	sum, readings := 0, 0
	t0 := time.Now()
	for i := 0; time.Since(t0) < dur; i++ {
		d := shape.draw(r)
		measured := time.Since(t0) >= measureFrom
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			err := l.Execute(ctx, func(ctx context.Context) error {
				if d < 0 {
					<-ctx.Done()
					return ctx.Err()
				}
				time.Sleep(d)
				return nil
			})
			if measured {
				offered.Add(1)
				if errors.Is(err, policy.ErrRejected) {
					rejected.Add(1)
				}
			}
		})
		time.Sleep(every)
		if measured && i%20 == 0 {
			lim := l.Limit()
			res.limitMin, res.limitMax = min(res.limitMin, lim), max(res.limitMax, lim)
			res.maxActive = max(res.maxActive, l.Active())
			sum += lim
			readings++
		}
	}
	wg.Wait()
	res.offered, res.rejected = offered.Load(), rejected.Load()
	res.limitMean = float64(sum) / float64(max(readings, 1))
	return res
}

// A healthy dependency, whose latency does not depend on how many calls
// are in flight, is never limited below what it is offered, whatever the
// shape of its latency: 200, 400 and 800 calls a second (about 11, 22 and
// 44 in flight for the bimodal shape, 55 for 5% hung calls at 800), no
// capacity limit, each call with a deadline of 1 s. From 400 calls a second
// the calls exceed InitialLimit from the start, so the limit must grow
// through windows that reach it without the tail lowering it. In -short
// the runs above 200 calls a second last 30 s, not 90.
func TestHealthyTailIsNotLimited(t *testing.T) {
	seeds := uint64(3)
	if testing.Short() {
		seeds = 1
	}
	for _, rate := range []int{200, 400, 800} {
		dur := 90 * time.Second
		if testing.Short() && rate > 200 {
			dur = 30 * time.Second
		}
		for _, sh := range healthyShapes {
			t.Run(fmt.Sprintf("%d/%s", rate, sh.name), func(t *testing.T) {
				for seed := range seeds {
					t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { healthyRun(t, sh, seed, rate, dur) })
				}
			})
		}
	}
}

// healthyRun runs one of TestHealthyTailIsNotLimited's simulations.
func healthyRun(t *testing.T, sh latencyShape, seed uint64, rate int, dur time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{})
		r := openLoop(l, sh, seed, rate, dur, 5*time.Second, time.Second)
		t.Logf("%s at %d/s seed %d: limit mean %.1f [%d..%d], max active %d, %d of %d rejected (%.2f%%) %+v",
			sh.name, rate, seed, r.limitMean, r.limitMin, r.limitMax, r.maxActive, r.rejected, r.offered,
			100*float64(r.rejected)/float64(r.offered), l.State())
		if r.rejected*1000 > r.offered {
			t.Errorf("%s at %d calls/s, seed %d: %d of %d calls rejected (limit %d to %d); want at most 0.1%%",
				sh.name, rate, seed, r.rejected, r.offered, r.limitMin, r.limitMax)
		}
	})
}

// A probe's no-load mean is the mean of the calls it admitted, the slow
// ones included. Of calls that take 5 ms or (one in ten) 500 ms, the first
// ten to answer are nearly all fast ones: a probe that ended on them read
// a mean of about 5 ms against a true 54.5 ms. The first probe of 100
// limiters (25 in -short), each under 20 closed-loop callers, must average
// near the true mean.
func TestProbeMeasuresTheMeanOfATail(t *testing.T) {
	limiters := 100
	if testing.Short() {
		limiters = 25
	}
	var sum time.Duration
	for seed := range uint64(limiters) {
		synctest.Test(t, func(t *testing.T) {
			l := mustNew(t, adaptive.Config{})
			r := rand.New(rand.NewPCG(seed, 9))
			var mu sync.Mutex
			draw := func() time.Duration {
				mu.Lock()
				defer mu.Unlock()
				return healthyShapes[0].draw(r)
			}
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					for ctx.Err() == nil {
						d := draw()
						if l.Execute(ctx, func(context.Context) error { time.Sleep(d); return nil }) != nil {
							time.Sleep(time.Millisecond)
						}
					}
				})
			}
			for l.State().Probing {
				time.Sleep(time.Millisecond)
			}
			st := l.State()
			stop()
			wg.Wait()
			if !st.Measured {
				t.Errorf("seed %d: %+v; want the first probe measured", seed, st)
			}
			sum += st.Base
		})
	}
	mean := sum / time.Duration(limiters)
	t.Logf("mean of %d probes' no-load means: %v (true mean 54.5ms)", limiters, mean)
	if mean < 35*time.Millisecond || mean > 80*time.Millisecond {
		t.Errorf("the first probes of %d limiters read a no-load mean of %v on average; want 35 to 80 ms (the true mean is 54.5 ms)", limiters, mean)
	}
}

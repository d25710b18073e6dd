package adaptive_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight/watertight/adaptive"
)

// dependency simulates a service that serves capacity calls at once at
// latency base and queues the rest: a call that finds n in flight (itself
// included) takes base x (1 + max(0, n-capacity)/capacity), fixed when it
// starts. Its calls sleep, so it runs in a synctest bubble on fake time.
type dependency struct {
	mu       sync.Mutex
	inFlight int
	capacity int
	base     time.Duration
	fail     error // if set, calls fail at once with it
}

func (d *dependency) set(capacity int, base time.Duration) {
	d.mu.Lock()
	d.capacity, d.base = capacity, base
	d.mu.Unlock()
}

func (d *dependency) failWith(err error) {
	d.mu.Lock()
	d.fail = err
	d.mu.Unlock()
}

func (d *dependency) call(context.Context) error {
	d.mu.Lock()
	if err := d.fail; err != nil {
		d.mu.Unlock()
		return err
	}
	d.inFlight++
	over := max(0, d.inFlight-d.capacity)
	lat := time.Duration(float64(d.base) * (1 + float64(over)/float64(d.capacity)))
	d.mu.Unlock()
	time.Sleep(lat)
	d.mu.Lock()
	d.inFlight--
	d.mu.Unlock()
	return nil
}

// startLoad runs workers closed-loop callers of dep through l until the
// returned stop is called. A caller rejected, or failed at once, pauses 1 ms
// (fake time must move on).
func startLoad(l *adaptive.Limiter, dep *dependency, workers int) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for !done.Load() {
				if err := l.Execute(context.Background(), dep.call); err != nil {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	return func() { done.Store(true); wg.Wait() }
}

// trajectory records a limiter's estimate over fake time.
type trajectory struct {
	at  []time.Duration
	est []float64
	t0  time.Time
}

// run lets d pass, sampling l's estimate every step.
func (tr *trajectory) run(l *adaptive.Limiter, d, step time.Duration) {
	if tr.t0.IsZero() {
		tr.t0 = time.Now()
	}
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(step)
		tr.at = append(tr.at, time.Since(tr.t0))
		tr.est = append(tr.est, l.State().Estimate)
	}
}

// span returns the lowest and highest estimate sampled in [from, to].
func (tr *trajectory) span(from, to time.Duration) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for i, at := range tr.at {
		if at >= from && at <= to {
			lo, hi = min(lo, tr.est[i]), max(hi, tr.est[i])
		}
	}
	return lo, hi
}

// at returns the estimate sampled last at or before t.
func (tr *trajectory) estAt(t time.Duration) float64 {
	v := math.NaN()
	for i, at := range tr.at {
		if at <= t {
			v = tr.est[i]
		}
	}
	return v
}

// String lists the estimate at every second.
func (tr *trajectory) String() string { return tr.format(0, math.MaxInt64, time.Second) }

// format lists the estimate in [from, to] every step.
func (tr *trajectory) format(from, to, step time.Duration) string {
	var b strings.Builder
	for i, at := range tr.at {
		if at >= from && at <= to && at%step == 0 {
			fmt.Fprintf(&b, " %v:%.1f", at, tr.est[i])
		}
	}
	return b.String()
}

package hedge

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// delayEstimator learns a Hedge's delay: a quantile of the last window
// latencies, at least a floor. It recomputes the quantile once every
// window/16 samples, so a sort costs each sample about 16 x log(window)
// comparisons.
type delayEstimator struct {
	q     float64
	floor time.Duration
	cur   atomic.Int64 // the delay in force, in ns; -1: none yet

	mu      sync.Mutex
	ring    []int64 // ns
	next    int     // where the next sample goes
	n       int     // samples in ring
	since   int     // samples added since the last recomputation
	scratch []int64
}

// newDelayEstimator returns an estimator whose delay is floor until it
// has minSamples latencies, none if floor is 0.
func newDelayEstimator(q float64, floor time.Duration, window int) *delayEstimator {
	e := &delayEstimator{q: q, floor: floor, ring: make([]int64, window), scratch: make([]int64, window)}
	if floor > 0 {
		e.cur.Store(int64(floor))
	} else {
		e.cur.Store(-1)
	}
	return e
}

// delay returns the delay in force, or a negative value for none yet.
func (e *delayEstimator) delay() time.Duration { return time.Duration(e.cur.Load()) }

func (e *delayEstimator) add(d time.Duration) {
	e.mu.Lock()
	e.ring[e.next] = int64(d)
	if e.next++; e.next == len(e.ring) {
		e.next = 0
	}
	if e.n < len(e.ring) {
		e.n++
	}
	e.since++
	if e.n >= minSamples && e.since >= max(1, e.n/16) {
		e.since = 0
		e.cur.Store(int64(max(time.Duration(e.quantile()), e.floor)))
	}
	e.mu.Unlock()
}

// quantile returns the q-quantile of the samples (nearest rank). e.mu must
// be held.
func (e *delayEstimator) quantile() int64 {
	s := e.scratch[:e.n]
	copy(s, e.ring[:e.n])
	slices.Sort(s)
	k := int(math.Ceil(e.q*float64(e.n))) - 1
	return s[min(max(k, 0), e.n-1)]
}

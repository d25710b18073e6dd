package adaptive

import "time"

// Observe feeds the controller one sample, for the tests.
func (l *Limiter) Observe(d time.Duration, failed bool) { l.observe(d, failed, time.Now(), 0) }

// State is the controller's state, for the tests.
type State struct {
	Estimate float64
	NoLoad   time.Duration
	Measured bool
	Probing  bool
	Probes   int
	Quiet    int           // quiet windows that confirmed the no-load mean
	Base     time.Duration // the no-load mean
}

func (l *Limiter) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return State{l.ctl.limit, l.ctl.noLoad, l.ctl.measured, l.probing.Load(), l.ctl.probes, l.ctl.quiet, l.ctl.base}
}

// Drops counts the times the admission limit was lowered.
func (l *Limiter) Drops() int64 { return l.drops.Load() }

// Admission is the limit admission enforces now: Limit, or the probe's cap.
func (l *Limiter) Admission() int { return l.slots.Limit() }

// Answered is the number of calls in flight whose answer was marked.
func (l *Limiter) Answered() int { return l.answered() }

package breaker

import "time"

// Snapshot is a Breaker's state as a status page shows it.
type Snapshot struct {
	State State
	// Until is when an open breaker turns half-open; zero unless State is
	// Open, and when forced open.
	Until time.Time
	// Forced says the breaker is open by ForceOpen, until Reset.
	Forced bool
	// Counts are the counts of the closed period in force, as Counts
	// returns them, or zero.
	Counts Counts
}

// Snapshot returns the breaker's state without moving it on: unlike
// State, it reports no change and runs no hook, so reading it has no
// effect on the breaker. An open period whose time has passed reads
// half-open. The state and its end are read from atomics; the counts,
// only while closed, under the short locks each outcome takes to be
// counted.
func (b *Breaker) Snapshot() Snapshot {
	if b.forced.Load() {
		return Snapshot{State: Open, Forced: true}
	}
	m := b.cb.Load()
	if !m.open {
		s := Snapshot{State: Closed}
		if !m.held {
			// State rolls the window, as Counts does; a closed machine
			// changes no state doing so, so no hook runs.
			m.TwoStepCircuitBreaker.State()
			c := m.TwoStepCircuitBreaker.Counts()
			s.Counts = Counts{Requests: c.Requests, TotalSuccesses: c.TotalSuccesses, TotalFailures: c.TotalFailures,
				TotalExclusions: c.TotalExclusions, ConsecutiveSuccesses: c.ConsecutiveSuccesses,
				ConsecutiveFailures: c.ConsecutiveFailures, SlowCalls: b.slow.counts(m)}
		}
		return s
	}
	until := time.Unix(0, m.until)
	if !time.Now().Before(until) {
		return Snapshot{State: HalfOpen}
	}
	return Snapshot{State: Open, Until: until}
}

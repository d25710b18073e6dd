package breaker

import "strconv"

// State is the state of a [Breaker]. Its values are those of the
// watertight.breaker.state gauge: 0 closed, 1 half-open, 2 open. The zero
// value is Closed.
type State int

// The states of a Breaker, in the order of their gauge values.
const (
	// Closed lets every call through and counts its outcome.
	Closed State = iota
	// HalfOpen lets [Config.HalfOpenRequests] probes through after
	// [Config.OpenTimeout] has passed in Open, and rejects the rest.
	HalfOpen
	// Open rejects every call until [Config.OpenTimeout] has passed, or, once
	// [Breaker.ForceOpen] was called, until [Breaker.Reset].
	Open
)

// String returns "closed", "half-open" or "open", the value of the
// watertight.breaker.state attribute.
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return "breaker.State(" + strconv.Itoa(int(s)) + ")"
}

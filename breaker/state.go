package breaker

import "strconv"

// State is the state of a [Breaker]. The zero value is Closed.
type State int

// The states of a Breaker.
const (
	Closed   State = iota // every call goes through and is counted
	HalfOpen              // [Config.HalfOpenRequests] probes go through
	Open                  // every call is rejected
)

// String returns "closed", "half-open" or "open". Telemetry names
// half-open "half_open".
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

// Counts are the counts that a [Breaker]'s trip rules and probes are judged
// on. They cover the calls admitted since the last change of state, or
// since [New] or [Breaker.Reset]; while closed with a [Config.Window], only
// those admitted within it. A call's outcome is counted only if the state
// has not changed since it was admitted. The counters are 32 bits wide and
// wrap around.
type Counts struct {
	Requests             uint32 // calls admitted, done or not
	TotalSuccesses       uint32
	TotalFailures        uint32
	TotalExclusions      uint32 // outcomes that count as neither
	ConsecutiveSuccesses uint32 // an excluded outcome neither extends nor ends a run
	ConsecutiveFailures  uint32
	SlowCalls            uint32 // calls the slow rule judged slow, while closed
}

package breaker

import "strconv"

// State is the state of a [Breaker]. The zero value is Closed.
type State int

// The states of a Breaker.
const (
	// Closed lets every call through and counts its outcome.
	Closed State = iota
	// HalfOpen lets [Config.HalfOpenRequests] probes through after
	// [Config.OpenTimeout] has passed in Open, and rejects the rest.
	HalfOpen
	// Open rejects every call until [Config.OpenTimeout] has passed (or the
	// time given to [Breaker.OpenUntil]), or, once [Breaker.ForceOpen] was
	// called, until [Breaker.Reset].
	Open
)

// String returns "closed", "half-open" or "open". Telemetry names
// half-open "half_open" in its watertight.breaker.state and
// watertight.breaker.from attributes.
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

// Counts are the counts of a [Breaker]'s calls that its trip rules and
// half-open probes are judged on, as [Breaker.Counts] reports them. They
// cover the calls admitted since the breaker's last change of state, or
// since [New] or [Breaker.Reset]. While closed with a [Config.Window], they
// cover only the calls admitted within the rolling window, which forgets
// them a bucket at a time. A call's outcome is counted in the bucket in
// which the call was admitted. It is not counted if the breaker has
// changed state since, or if that bucket has left the window. Every change
// of state clears the counts, so while open every count is zero; while
// half-open, they are the probes' counts. The counters are 32 bits wide
// and wrap around: a closed breaker without a Window never clears them.
type Counts struct {
	// Requests is the number of calls admitted, whether their outcome is
	// known yet or not, and whatever it is.
	Requests uint32
	// TotalSuccesses is the number of outcomes counted as successes.
	TotalSuccesses uint32
	// TotalFailures is the number of outcomes counted as failures.
	TotalFailures uint32
	// TotalExclusions is the number of outcomes counted as neither (a
	// rejection, context.Canceled: see [Config.IsFailure]). While half-open,
	// Requests - TotalExclusions is the number of probe places taken.
	TotalExclusions uint32
	// ConsecutiveSuccesses is the length of the current run of successes:
	// 0 after a failure. An excluded outcome neither extends nor ends it.
	ConsecutiveSuccesses uint32
	// ConsecutiveFailures is the length of the current run of failures,
	// the one [Config.ConsecutiveFailures] is checked against: 0 after a
	// success. An excluded outcome neither extends nor ends it.
	ConsecutiveFailures uint32
}

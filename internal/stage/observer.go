package stage

import "time"

// Observer is implemented by the two-phase face of a policy in the Bulkhead
// slot that learns from each attempt's latency (an adaptive concurrency
// limit). Package compose times every attempt below that slot and calls
// Observe once per attempt that ran: d is the attempt's latency (up to the
// answer, with an [AnswerClock]), and failed tells a failure, which is not a
// latency sample, from a success or a timeout, which are. Rejections and
// the caller's cancellations are not reported. Observe must be safe for
// concurrent use and quick: it runs on the caller's goroutine.
type Observer interface {
	Observe(d time.Duration, failed bool)
}

package stage

import "time"

// Observer is implemented by the two-phase face of a policy in the Bulkhead
// slot that learns from each attempt's latency (an adaptive concurrency
// limit: package adaptive). Package compose times every attempt below that
// slot and calls Observe once per attempt that ran, before the slot's Exit:
// d is the attempt's latency (up to the answer, with an [AnswerClock]).
//
// The caller classifies the outcome; Observe does not see the error.
// failed = false makes d a latency sample: compose passes it for a success
// and for a timeout (errors.Is context.DeadlineExceeded: a long latency is
// what a congested dependency shows). failed = true is a failure, counted
// as one and not a latency sample (a dependency that fails fast must not
// look fast): compose passes it for any other error. Rejections (errors.Is
// policy.ErrRejected) and the caller's cancellations (context.Canceled) say
// nothing about the dependency and are not reported, nor is an attempt that
// panicked. Observe must be safe for concurrent use and quick: it runs on
// the caller's goroutine.
type Observer interface {
	Observe(d time.Duration, failed bool)
}

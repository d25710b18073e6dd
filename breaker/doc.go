// Package breaker stops calling a dependency that keeps failing. A
// [Breaker] counts the outcomes of the calls it lets through. When a trip
// rule holds, it opens and rejects every call for [Config.OpenTimeout]. It
// then turns half-open and lets [Config.HalfOpenRequests] probes through.
// It closes again once that many have succeeded; one failed probe opens it
// again.
//
// The state machine is github.com/sony/gobreaker/v2's
// TwoStepCircuitBreaker. [Breaker.State] and [Breaker.Counts] show where it
// stands.
//
// # Trip rules
//
// Two rules, each off at its zero value, either of which trips the breaker:
//
//   - ConsecutiveFailures = N: trip on the Nth failure in a row (not the
//     N+1th, as gobreaker's own default "> 5" would);
//   - FailureRatio = r: trip when, in the rolling [Config.Window], at least
//     [Config.MinRequests] calls succeeded or failed and
//     failures / (successes + failures) >= r.
//
// With neither set, the breaker trips on the 5th consecutive failure.
// MinRequests without FailureRatio is ignored.
//
// # Outcomes
//
//	what happened                          Execute returns                  counted as
//	-------------------------------------  -------------------------------  ---------------------------------
//	fn panicked or called runtime.Goexit   the panic goes on up             failure, always
//	ctx ended, not by a Deadline's timer   fn's result, unchanged           excluded: neither, always
//	(the caller's cancel or deadline, a
//	hedge's losing attempt), whatever fn
//	returned, nil included
//	fn returned nil                        nil                              success
//	fn returned a rejection (an inner      err, unchanged                   excluded: neither, always
//	policy's) or context.Canceled
//	fn returned a throttled error          err, unchanged                   excluded, when Config.IsFailure
//	(policy.ErrThrottled, a 429)                                            is nil
//	fn returned err, IsFailure(err)        err, unchanged                   failure
//	fn returned err, !IsFailure(err)       err, unchanged                   success
//	IsFailure panicked or called           the panic goes on up             excluded
//	runtime.Goexit
//	open, by its rules or ForceOpen        *policy.RejectedError, Reason    watertight.rejections{reason=open}
//	                                       "open"; fn not called
//	half-open, all probes taken            *policy.RejectedError, Reason    watertight.rejections
//	                                       "half_open_full"; fn not called  {reason=half_open_full}
//
// The first row that applies decides. A ctx that a Deadline's timer ended
// goes on to the rows below it. So with the default classification, a
// timeout (a Deadline's, an attempt deadline's, fn's own DeadlineExceeded)
// is a failure.
//
// The end of the caller's own context is told from the policies' timeouts
// by deadline.Fired, not by the error fn returned. A Deadline's timer ends
// a context at its deadline with a cause matching deadline.ErrExceeded. A
// hedge's loser's cause is retry.ErrHedgeLost. A caller's end is neither,
// even when the caller cancels with a Deadline's error as the cause (as
// errgroup.WithContext does). Any watertight Deadline's timer counts, this
// pipeline's or an enclosing one's. A caller whose own deadline comes
// before the pipeline's Deadline hides a hanging dependency from the
// breaker: give the pipeline an Attempt timeout shorter than its callers'
// deadlines.
//
// Every rejection matches [ErrOpen] and [policy.ErrRejected] with
// [errors.Is], and allocates nothing. It adds a watertight.rejected event
// to the span in ctx if it is recording, and is passed to
// [Config.OnReject]. Rejections and cancellations are excluded because
// they say nothing about the dependency. An excluded probe frees its
// half-open place for another.
//
// # Telemetry
//
// Attributes watertight.policy.kind = "breaker" and watertight.policy.name =
// [Config.Name] are on everything:
//
//   - watertight.rejections counter, with watertight.rejection.reason;
//   - watertight.breaker.transitions counter, with watertight.breaker.from =
//     the state left and watertight.breaker.state = the state entered
//     ("closed", "half_open", "open");
//   - watertight.breaker.state observable gauge, a state set: one point per
//     state, 1 for the current state and 0 for the others;
//     [Breaker.Close] unregisters it;
//   - span events watertight.rejected and watertight.breaker.transition (with
//     watertight.breaker.from and watertight.breaker.state) on the span
//     already in ctx, if it is recording. A Breaker never starts a span.
//
// A change is counted, and added to the span, by the call that reports it,
// usually the call that caused it. A breaker whose OpenTimeout has passed
// is collected as half-open, and that change may be reported (and
// OnStateChange called) from the collecting goroutine.
//
// # Concurrency
//
// A Breaker is safe for concurrent use. Its hooks run outside every lock:
//
//   - OnStateChange runs after the change, in the order of the changes and
//     never concurrently. It may call the Breaker.
//   - IsFailure runs on the caller's goroutine and may call the Breaker.
//   - No lock is held while fn runs.
//
// When fn panics or calls runtime.Goexit, the call is reported as a
// failure, so such a probe opens the breaker again instead of wedging it.
// Nothing is recovered: the panic goes on with fn's own value, and a crash
// report still shows where fn panicked. A panic or Goexit in IsFailure
// leaves the call excluded, which frees a half-open probe's place, and the
// panic or Goexit goes on too. panic(nil) behaves the same whatever
// GODEBUG=panicnil says.
//
// [Breaker.State] and the gauge report half-open as soon as OpenTimeout has
// passed, without waiting for a call.
//
// A breaker forced open by [Breaker.ForceOpen] rejects every call until
// [Breaker.Reset]. Reset starts the counts again and drops the late
// outcomes of calls admitted before it.
//
// [Breaker.OpenUntil] and [Breaker.GateProbes] let a breaker shared by
// replicas (as in module redisstate) apply an open decided elsewhere, and
// let only the replica that holds a lease send half-open probes.
//
// # Cost
//
// The success path of Execute takes gobreaker's two locked steps, reads the
// clock twice and allocates once. A rejection allocates nothing. An open
// breaker rejects without a lock or a clock read until a tenth of the open
// period (at most 100 ms) before it ends. The open period is never longer
// for it, unless a timer runs later than that margin.
package breaker

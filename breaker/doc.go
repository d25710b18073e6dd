// Package breaker stops calling a dependency that keeps failing, or that
// has turned slow. A [Breaker] counts the outcomes of the calls it lets
// through. When a trip rule holds, it opens and rejects every call for
// [Config.OpenTimeout].
// Then it turns half-open and lets [Config.HalfOpenRequests] probes
// through. It closes once that many have succeeded; one failed probe opens
// it again. The state machine is github.com/sony/gobreaker/v2's
// TwoStepCircuitBreaker.
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
//	(policy.ErrThrottled, a 429) or a                                       is nil
//	spent quota (policy.ErrQuotaSpent)
//	fn returned err, IsFailure(err)        err, unchanged                   failure
//	fn returned err, !IsFailure(err)       err, unchanged                   success
//	IsFailure panicked or called           the panic goes on up             excluded
//	runtime.Goexit
//	open, by its rules or ForceOpen        *policy.RejectedError, Reason    watertight.rejections{reason=open}
//	                                       "open"; fn not called
//	half-open, all probes taken            *policy.RejectedError, Reason    watertight.rejections
//	                                       "half_open_full"; fn not called  {reason=half_open_full}
//
// The first row that applies decides. A ctx ended by a Deadline's timer
// ([policy.TimedOut]) goes on to the rows below it. So by default a timeout
// is a failure. A context the caller cancels is excluded, even with a
// Deadline's error as its cause. So a caller whose deadline comes before
// the pipeline's hides a hanging dependency from the breaker: give the
// pipeline an Attempt timeout shorter than its callers' deadlines.
//
// An excluded probe frees its half-open place for another. Nothing is
// recovered from a panic: it goes on with fn's own value.
//
// # Slow calls
//
// With [Config.SlowCallRatio] set, a call is also judged on its time,
// apart from its outcome: once it has run [Config.SlowCallDuration]
// without an answer, it is slow. One timer, armed for the oldest call not
// yet judged, judges it the moment it passes that time, so a call that
// hangs counts as slow long before it ends; its answer, when it comes,
// still reaches the caller, and its outcome counts as the table says (a
// slow call whose outcome is excluded stays counted as slow). The time
// runs from Allow to Done, or to the answer marked on the context from
// [Permit.Begin]: httppolicy's Transport marks the first byte of a
// streamed body (the first event of an event stream). With a first-byte
// timeout it reads ahead to that byte; without one, it marks it when the
// caller reads it, so a caller that waits before reading adds its wait.
// Execute times fn to its return.
//
// While closed, the breaker opens when the slow calls admitted in the
// window reach SlowCallRatio of the calls admitted in it, counting those
// that ended as a success or a failure and those judged slow that did not
// (yet); it needs [Config.SlowCallMinCalls] of them. The rule is judged
// when a call turns slow, and, while the window holds slow calls, as it
// rolls and as calls end, so a share that rises as older calls are
// forgotten, or calls that reach the minimum, trip the breaker too. While
// half-open, a probe that turns slow opens it again, as a failed probe
// does. A trip by the slow rule is reported, with context.Background(),
// from the goroutine that judged it: the timer's, or an ending call's. An
// OnStateChange that panics on the timer's goroutine crashes the program,
// as any goroutine's panic does. With testing/synctest, build and use a
// Breaker with a slow rule in one bubble: its clock starts when it is
// built, and its timer belongs to the bubble of its first call.
//
// # Changing settings
//
// [Breaker.Update] changes the settings of a running breaker. Its state,
// its counts and an open period under way survive it, and calls in flight
// run on. The trip rules apply at once: the next failure, or the slow
// rule's next judgment, is judged by them on the counts so far; the
// update does not judge them itself. OpenTimeout applies from the next
// opening. Window and HalfOpenRequests are fixed per period (gobreaker
// fixes them per state machine): they apply from the next period, or at
// once after [Breaker.Reset]. SlowCallDuration applies at once, to the
// calls being timed too. The slow rule cannot be turned on or off: build
// a new Breaker for that. [Breaker.Config] returns the Config in force.
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
//   - watertight.breaker.slow counter: the calls the slow rule judged slow;
//   - watertight.breaker.state observable gauge, a state set: one point per
//     state, 1 for the current state and 0 for the others;
//   - span events watertight.rejected and watertight.breaker.transition (with
//     watertight.breaker.from and watertight.breaker.state) on the span
//     already in ctx, if it is recording. A Breaker never starts a span.
//
// A change is recorded by the call that reports it, usually the call that
// caused it. A change to half-open may be reported from the goroutine that
// collects the gauge.
//
// # Cost
//
// A rejection allocates nothing. An open breaker rejects without a lock or
// a clock read until a tenth of the open period (at most 100 ms) before it
// ends. The slow rule adds to each call one monotonic clock read and two
// holds of a mutex, the second around gobreaker's count of the outcome;
// Permit.Begin adds a context, two allocations and one more clock read. It keeps 24 bytes for each call admitted since the
// oldest call not yet judged or ended (at most SlowCallDuration ago), and
// an entry for each slow call still running.
package breaker

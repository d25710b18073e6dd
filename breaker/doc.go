// Package breaker stops calling a dependency that keeps failing: a [Breaker]
// counts the outcomes of the calls it lets through and, when a trip rule
// holds, opens and rejects every call for [Config.OpenTimeout]. It then
// turns half-open, lets [Config.HalfOpenRequests] probes through, and closes
// again once that many have succeeded; one failed probe opens it again.
//
// The state machine is github.com/sony/gobreaker/v2, driven in two steps
// for every call (its TwoStepCircuitBreaker: Allow admits the call, the
// done func it returns reports the outcome), with its traps handled: see
// Concurrency below. [Breaker.State] and [Breaker.Counts] show where it
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
// goes on to the rows below it: with the default classification, a timeout
// (a Deadline's, an attempt deadline's, fn's own DeadlineExceeded) is a
// failure. The end of the caller's own context is told from our timeouts
// by deadline.Fired, not by the error fn returned: a Deadline's timer ends a
// context at its deadline with a cause matching deadline.ErrExceeded; a
// hedge's loser's cause is retry.ErrHedgeLost; a caller's is neither, even
// when the caller cancels, before its own deadline, with a Deadline's error
// as the cause (as errgroup.WithContext does). Any
// watertight Deadline's timer counts, this pipeline's or an enclosing one's.
// A caller whose own deadline comes before the pipeline's Deadline hides a
// hanging dependency from the breaker: give the pipeline an Attempt
// timeout shorter than its callers' deadlines.
//
// Every rejection matches [ErrOpen] and [policy.ErrRejected] with
// [errors.Is], is prepared at [New] (rejecting allocates nothing), adds a
// watertight.rejected event to the span in ctx if it is recording, and is
// passed to [Config.OnReject]. Rejections and cancellations are excluded
// rather than counted because they say nothing about the dependency: a
// breaker that counted an inner bulkhead's rejections, or callers hanging
// up, would open on a healthy dependency. An excluded probe frees its
// half-open place for another.
//
// # Telemetry
//
// Attributes watertight.policy.kind = "breaker" and watertight.policy.name =
// [Config.Name] on everything:
//
//   - watertight.rejections counter, with watertight.rejection.reason;
//   - watertight.breaker.transitions counter, with watertight.breaker.from =
//     the state left and watertight.breaker.state = the state entered
//     ("closed", "half_open", "open");
//   - watertight.breaker.state observable gauge, a state set: one point per
//     state, its watertight.breaker.state attribute "closed", "half_open"
//     or "open", 1 for the current state and 0 for the others;
//     [Breaker.Close] unregisters it;
//   - span events watertight.rejected and watertight.breaker.transition (with
//     watertight.breaker.from and watertight.breaker.state) on the span
//     already in ctx, if it is recording. A Breaker never starts a span.
//
// A change is counted, and added to the span, by the call that reports it
// (see Concurrency): usually the call that caused it. Collecting the gauge
// asks gobreaker for the state, so a breaker whose OpenTimeout has passed is
// collected as half-open, and that change may be reported (and
// OnStateChange called) from the collecting goroutine.
//
// # Concurrency
//
// gobreaker calls OnStateChange, ReadyToTrip, IsSuccessful and IsExcluded
// under its own mutex, so a hook that called back into it (even State)
// would deadlock, and a slow hook would stall every call. The Breaker
// therefore only queues each state change, under a small mutex of its own,
// from gobreaker's OnStateChange. After every call into gobreaker (admit,
// report, State, Counts) the queue is flushed outside every lock: the
// change is counted, added to the span in ctx, and passed to
// [Config.OnStateChange].
// One goroutine flushes at a time, so hooks run in the order of the changes
// and never concurrently; a goroutine that finds a flush under way leaves
// its changes to it, which is what lets a hook call the Breaker. The
// Breaker judges each call itself, outside every lock, and reports only the
// verdict to gobreaker: IsFailure runs on the caller's goroutine and may call
// the Breaker.
//
// A call admitted by gobreaker must report its outcome, or a half-open
// breaker waits for its probe forever. When fn panics or calls
// runtime.Goexit (t.FailNow in a test), the call is reported as a failure
// from a deferred call, so such a probe
// opens the breaker again instead of wedging it. That deferred call
// recovers nothing: the panic goes on with fn's own value, and a crash
// report still shows where fn panicked. A panic or Goexit in IsFailure
// leaves the call uncounted: it is reported as excluded, which frees a
// half-open probe's place, and the panic or Goexit goes on too. Since
// nothing is recovered, a panic need never be told from a Goexit, and
// panic(nil) behaves the same whatever GODEBUG=panicnil says. No lock is
// held while fn runs.
//
// gobreaker turns open into half-open when it is asked after the timeout,
// not on a timer; [Breaker.State] asks it, so State and the gauge report
// half-open as soon as OpenTimeout has passed, without waiting for a call.
//
// [Breaker.ForceOpen] and [Breaker.Reset] work beside gobreaker: a forced
// breaker rejects before asking it, and Reset swaps in a fresh gobreaker
// instance (an atomic pointer), so counts start again and late outcomes of
// calls admitted by the old one are dropped. While forced, the changes of
// the gobreaker instance underneath (a probe admitted before ForceOpen
// closing it, say) are not reported: the breaker is open until Reset.
//
// [Breaker.OpenUntil] and [Breaker.GateProbes] let a breaker shared by
// replicas (the nested module redisstate) apply an open decided elsewhere,
// with the time it lasts, and let only the replica that holds a lease send
// half-open probes: gobreaker's own timer would send every replica
// half-open at once. Every open period, whatever opened it (a trip, a
// failed probe, OpenUntil), runs on a gobreaker instance of its own,
// tripped when it is made and held open by the Breaker until the period
// ends; gobreaker then runs its half-open period. See breaker.go.
//
// # Cost
//
// The success path of Execute costs gobreaker's two locked steps, each with
// a clock read, and one allocation: the done func that gobreaker's Allow
// returns. A rejection allocates nothing. An open breaker rejects without
// asking gobreaker (no lock, no clock read) until a timer clears a
// fast-path flag a tenth of the open period (at most 100 ms) before it
// ends; from then on the clock decides, so the flag never makes the open
// period longer unless the timer runs later than that margin.
package breaker

// Package ratelimit paces the calls to one dependency the way the
// dependency asks. A [Limiter] admits each attempt, and holds it while the
// server says its quota is spent.
//
// In a compose pipeline a Limiter admits every attempt, retries included.
// A held attempt keeps its bulkhead slot.
//
// # The hold and the gate
//
// [Limiter.Observe] takes what one answer of the dependency says about its
// quota, as an [Answer]. httppolicy.LimiterSignals reads one from every
// response of an httppolicy.Transport. An error of fn's that matches
// [policy.ErrThrottled] and has a RetryAfter method feeds the hold too, and
// so does [Limiter.HoldFor]. While a hold is in force, every attempt
// waits.
//
// When a hold ends, one attempt goes first. Each answer then lets through
// as many more as its Remaining count says are left, less the attempts let
// through that the server had not yet counted. While other attempts let
// through are out, an answer can lower that number but not raise it. An
// answer older than one already seen (its FullAt earlier) is ignored.
//
// The gate also lets one more attempt through every r/(L-n), with n of a
// limit L left and the bucket full again in r (every r if L <= n+1, at most
// MaxHold). Until an answer names a count, it lets one through every hold's
// length after the hold's end.
//
// The gate opens when at least a tenth of the limit is left and nobody
// waits. It also opens when an answer names no count, and when an attempt
// succeeds before any answer has named a count. An attempt let through
// that fails, or ends as the last one out, lets the next one go.
//
// The wait behind the gate is bounded by the attempt's deadline and
// MaxHold, not by MaxWait. It lasts until ctx ends, not until just before
// its deadline: an answer may still open the gate.
//
// # Outcomes
//
//	what happened                                   the attempt
//	----------------------------------------------  -----------------------------------------
//	no hold, rate allows                            runs at once
//	hold or rate wait that ends before the          waits, then runs
//	  attempt's deadline and within MaxWait
//	after a hold, behind the gate                   waits for the answers of the attempts let
//	                                                through or the timed release (see above)
//	a longer wait                                   rejected at once: *policy.RejectedError,
//	                                                Kind "ratelimit", Reason "throttled" (the
//	                                                hold) or "rate" (the client-side rate),
//	                                                matching ErrLimited and policy.ErrRejected
//	the hold grows during the wait past that bound  rejected, as above
//	behind the gate, answers naming counts, the     rejected at once, as above
//	  next timed release past the deadline or
//	  MaxHold
//	behind the gate past MaxHold                    rejected, as above
//	a Deadline's timer ends ctx during the wait     rejected, as above (fn never ran: not a
//	                                                timeout); in a retry's later attempt,
//	                                                ctx.Err() (fn ran in the call: the
//	                                                Deadline's timeout), and not counted
//	the caller's ctx is done during the wait        ctx.Err(); fn does not run
//
// A wait that wakes at or past the attempt's deadline ends as the two rows
// above say, once ctx is done: no attempt is admitted at its deadline.
//
// A rejection increments watertight.rejections and adds a
// watertight.rejected event to the span in ctx. A wait adds a
// watertight.ratelimit.hold event with the wait in seconds. The
// watertight.ratelimit.hold gauge reports the seconds the hold has left (0
// without one), read at each collection; [Limiter.Close] unregisters it.
//
// # Changing settings
//
// [Limiter.Update] changes the rates, MaxHold and MaxWait while the Limiter
// is in use; [Limiter.Config] returns the Config in force. An attempt reads
// its MaxWait and MaxHold once, as it enters. A rate changed is retuned in
// place, keeping the tokens already spent: an attempt that draws from it
// after the update draws at the new rate, and a rate turned on starts with
// a full burst. An attempt already waiting keeps its bounds and its
// reservation. A hold already on keeps its
// end; MaxHold caps the holds set after. The hold, the gate and what the
// answers have told them survive every Update.
//
// # A shared quota
//
// [Config.Shared] shares a quota with other processes: redisstate.Quota
// holds one in Redis for a fleet. An attempt waits for this Limiter's
// hold, gate and rates first, then for the shared quota, whose wait ends
// by the attempt's MaxWait (counted from when it entered) or just before
// its deadline, whichever is sooner. A rejection by the shared quota
// comes from it, matches [ErrLimited], and ends the attempt let through
// the gate as a failure does. A Deadline's timer that ends the shared wait
// ends it as it ends this Limiter's own: rejected, with reason "rate".
//
// A hold that an answer or a throttled failure sets here is passed to
// Shared.Hold too, so that every process holds.
//
// An attempt is charged its declared cost ([WithCost]) as it is admitted,
// and settled as it ends:
//
//   - at the tokens [ReportUsage] last reported for it, whatever its
//     outcome;
//   - else, if it succeeded, at its declared cost;
//   - else (it failed, was rejected below, panicked), at 0: refunded.
//
// ReportUsage reaches the attempt through the ctx fn is given, which
// [Permit.Begin] prepares for [Limiter.Wait]'s callers; Execute and a
// compose pipeline call it.
//
// # No double wait
//
// The Limiter takes a throttled failure's Retry-After into its hold. It
// hands the failure on with a RetryAfter of 0; errors.Is and errors.As see
// through that wrapper. So a retry above waits its own schedule, and the
// next attempt waits out the rest of the hold here.
package ratelimit

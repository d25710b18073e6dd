// Package ratelimit paces the calls to one dependency the way the
// dependency asks. A [Limiter] admits each attempt, and holds it while the
// server says its quota is spent.
//
// A Limiter fills the RateLimit slot of a compose pipeline, between Retry
// and Breaker. So it admits every attempt, retries included. A held attempt
// waits before the breaker, so it takes no half-open probe. It waits after
// the bulkhead and keeps its bulkhead slot: size the bulkhead (or MaxWait)
// for the calls you are willing to keep waiting.
//
// # The shared hold
//
// [Limiter.Observe] takes what one answer of the dependency says about its
// quota, as an [Answer]: a hold, and the count, limit and reset of its
// requests bucket. httppolicy.LimiterSignals reads one from every response
// of an httppolicy.Transport, successes included: a 200 may carry
// x-ratelimit-remaining-requests: 0. watertight.NewHTTPClient wires it, and
// httppolicy.RateLimitHold lists the headers it reads. While a hold is in
// force, every attempt through the Limiter waits. A hold is capped at
// [Config.MaxHold]. When it ends, the gate (below) lets one attempt go, and
// the next answer says what is left.
//
// An error of fn's that matches [policy.ErrThrottled] and has a RetryAfter
// method feeds the hold too (httppolicy's StatusError for a 429 does). So a
// Limiter works without a Transport, around an SDK call whose rate-limit
// error says how long to wait.
//
// # After a hold: the gate
//
// When a hold ends, the attempts that waited do not all go at once. One
// goes first. Each answer then lets through as many more as its Remaining
// count says are left, less the attempts let through that the server had
// not yet counted. An answer that comes while other attempts let through
// are out can lower that number but not raise it. An answer older than one
// already seen (its FullAt earlier) is ignored. The answer that set the
// hold counts as seen, less a second. A FullAt further than MaxHold away (a
// daily bucket's) orders nothing.
//
// The bucket is taken to refill continuously: with n left of a limit L,
// full again in r, one request comes back every r/(L-n). So the gate also
// lets one more through every r/(L-n) after the last answer with a count
// (every r if L <= n+1; at most MaxHold). Until an answer names a count, it
// lets one through every hold's length after the hold's end. Released
// attempts add up while nobody comes, to at most the limit; the next answer
// with a count lowers them as above.
//
// The gate opens when what is left is at least a tenth of the limit and
// nobody waits (an attempt asleep on the hold is waiting). It also opens
// when an answer names no count, and when an attempt succeeds before any
// answer has named a count. An attempt let through that fails without an
// answer (a connection error, a panic), or ends as the last one out, lets
// the next one go.
//
// The wait behind the gate is bounded by the attempt's deadline and
// MaxHold, not by MaxWait. Once answers name counts, an attempt whose bound
// comes before the next timed release is rejected at once, keeping the
// rest of its deadline for a fallback. Before that, it waits up to its
// bound, since the first attempt's success may open the gate.
//
// # Client-side rate
//
// A Limiter can also keep the calls under a rate of its own
// (golang.org/x/time/rate token buckets): [Config.RequestsPerSecond], and
// [Config.TokensPerMinute], which each call draws on by the cost it
// declares with [WithCost].
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
//	behind the gate past the deadline or MaxHold    rejected, as above
//	a Deadline's timer ends ctx during the wait     rejected, as above (fn never ran: not a
//	                                                timeout)
//	the caller's ctx is done during the wait        ctx.Err(); fn does not run
//
// A rejection increments watertight.rejections (watertight.policy.kind
// "ratelimit", with watertight.rejection.reason) and adds a
// watertight.rejected event to the span in ctx. A wait adds a
// watertight.ratelimit.hold event with the wait in seconds.
//
// Under a retry, a rejection after a first attempt ran ends the call as the
// retry's ExhaustedError with Reason "rejected". A rejection caused by a
// Deadline's timer ends it as that Deadline's timeout, around fn's last
// error (see package retry).
//
// # No double wait
//
// A retry above a Limiter does not wait a throttled failure's Retry-After
// itself. The Limiter takes it into its hold and hands the failure on with
// a RetryAfter of 0; errors.Is and errors.As see through that wrapper. The
// retry waits its own schedule, and the next attempt waits out the rest of
// the hold here. So with MaxWait at most the retry's MaxInterval (as
// watertight.New sets a zero one), a Retry-After longer than MaxInterval ends in
// the Limiter's rejection, not in the retry's ReasonRetryAfter. A 503's
// Retry-After is not throttled: the retry waits it, and it feeds the hold
// too, so both end at the same moment.
//
// A Limiter is safe for concurrent use. Without a client-side rate, an
// attempt admitted while no hold or gate is in force reads no clock and
// takes no lock.
package ratelimit

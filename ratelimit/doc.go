// Package ratelimit paces the calls to one dependency the way the
// dependency asks: a [Limiter] admits each attempt, and holds it while the
// server has said that its quota is spent. It is the policy of the
// RateLimit slot of a compose pipeline, between Retry and Breaker, so that
// every attempt, retries included, is admitted by it, and a held attempt
// waits before the breaker (it takes no half-open probe) but after the
// bulkhead: a held attempt keeps its bulkhead slot while it waits, so size
// the bulkhead (or MaxWait) for the calls you are willing to keep waiting.
//
// # The shared hold
//
// [Limiter.Observe] feeds the Limiter what one answer of the dependency
// says about its quota, as an [Answer]: a hold, and the count, limit and
// reset of its requests bucket. httppolicy.LimiterSignals reads one from
// every response of an httppolicy.Transport, successes included, since
// x-ratelimit-remaining-requests: 0 arrives on a 200
// (watertight.NewHTTPClient wires it); httppolicy.RateLimitHold says which
// headers it reads and how long they hold. While a hold is in force, every
// attempt of every call through the Limiter waits, and the hold is capped
// at [Config.MaxHold]. When it ends, the gate (below) lets one attempt go,
// and the next answer says what is left.
//
// An error of fn's that matches [policy.ErrThrottled] (httppolicy's
// StatusError for a 429, or a user's own error) and has a RetryAfter method
// feeds the hold too, so a Limiter works without a Transport: around an SDK
// call whose rate-limit error says how long to wait.
//
// # After a hold: the gate
//
// When a hold ends, the attempts that waited for it do not all go at once:
// the quota refills gradually, and a burst would be answered with 429s.
// One attempt goes first, and each answer lets through as many more as
// its Remaining count says are left, less the attempts already let
// through whose requests the server had not counted yet. Answers on
// separate connections come back out of order, so one that comes while
// other attempts let through are out can lower that number but not raise
// it, and one older than an answer already seen (its FullAt earlier) is
// not read at all. The answer that set the hold counts as seen, less a
// second (resets in whole seconds order nothing closer). A FullAt further
// than MaxHold away (a daily bucket's) orders nothing.
//
// The quota refills while the attempts let through are out (streams stay out
// long after their answer; one may hang). The bucket is taken to refill
// continuously, as OpenAI's and Anthropic's do: with n left of a limit L,
// full again in r, one request comes back every r/(L-n). So the gate also
// lets one more through every r/(L-n) from the last answer with a count
// (every r if L is not above n+1; at most MaxHold), or, until an answer
// names a count, every hold's length from the hold's end. Released attempts
// add up while nobody comes, to at most the limit; the next answer with a
// count lowers them as above. Once what is left is at least a tenth of the
// limit and nobody waits (an attempt still asleep on the hold is waiting),
// the gate opens. An attempt let through that ends without an answer saying
// anything (a connection error, a panic), or as the last one out, lets the
// next one go. One that succeeds while no answer has named a count opens the
// gate. An answer that names no count opens it too: that dependency does not
// say. Waiting behind the gate is bounded by the attempt's deadline and
// MaxHold, not by MaxWait (which bounds a wait whose end the server named).
// Once answers name counts, an attempt whose bound comes before the next
// timed release is rejected at once, as one whose hold outlasts it is: it
// keeps the rest of its deadline for a fallback. Until then the probe's
// success may open the gate sooner, so it waits up to its bound. The timed
// release needs no timer of its own: it is counted when an attempt or an
// answer comes, and a waiter sleeps until the next one (its timer stopped
// when it stops waiting).
//
// # Client-side rate
//
// Optionally, the Limiter also keeps the calls under a rate of its own
// (golang.org/x/time/rate token buckets): [Config.RequestsPerSecond], and
// [Config.TokensPerMinute], which each call draws on by the cost it
// declares with [WithCost] (the prompt and answer tokens it expects, say).
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
// A rejection is counted in watertight.rejections (watertight.policy.kind
// "ratelimit", with watertight.rejection.reason) and adds a
// watertight.rejected event to the span in ctx; a wait adds a
// watertight.ratelimit.hold event with the wait in seconds. Under a retry,
// a rejection after a first attempt ran ends the call as the retry's
// ExhaustedError with Reason "rejected", as every rejection after fn ran
// does; one that a Deadline's timer caused ends it as that Deadline's
// timeout, around fn's last error (see package retry).
//
// # No double wait
//
// With a Limiter below it, a retry does not wait a throttled failure's
// Retry-After itself: the Limiter, having taken it into its hold, hands the
// failure on with a RetryAfter of 0, so the retry waits its own schedule
// and the next attempt waits out the rest of the hold here. With MaxWait at
// most the retry's MaxInterval (watertight.New sets it so), a Retry-After
// longer than MaxInterval thus ends in the Limiter's rejection (the retry's
// ExhaustedError, Reason "rejected") rather than the retry's
// ReasonRetryAfter. errors.Is and errors.As see through that wrapper to
// fn's error. A 503's Retry-After (not throttled: an overloaded server is
// failing) is left to the retry, which waits it; it feeds the hold too, so
// both end at the same moment.
//
// A Limiter is safe for concurrent use. Without a client-side rate,
// admission while no hold and no gate are in force costs one atomic load
// and no clock read.
package ratelimit

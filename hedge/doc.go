// Package hedge cuts the slow tail of calls that are safe to repeat. [Do]
// runs a call's first attempt; when it has not answered after a delay, it
// starts another beside it, up to Config.MaxHedges. Each attempt is a
// whole run of a policy (a pipeline): it takes its own bulkhead slot and
// breaker verdict. The first success wins, and the other attempts are
// canceled with the cause [ErrLost].
//
// A Hedge is not a policy: it runs whole calls of one, so it wraps a
// pipeline rather than taking a slot in it.
//
// # Outcomes
//
// After an attempt fails with err, the first rule that applies decides:
//
//	condition                                  outcome                           error returned
//	errors.Is(err, policy.ErrRejected)         no more hedges; the running       err, if no attempt ran fn; else
//	                                             attempts decide                 *retry.ExhaustedError, Reason "rejected"
//	the call's ctx is done                     stop                              err, with the latest failure
//	err marked with policy.Permanent, or        stop, the others canceled         err
//	  matching policy.ErrQuotaSpent
//	Config.ShouldRetry(err) == false           stop, the others canceled         err
//	otherwise                                  the next hedge starts at once,
//	                                             if MaxHedges and the budget allow
//	no attempt running, none to start          stop, exhausted                   *retry.ExhaustedError, Reason
//	                                                                               "max_attempts" or "budget", Kind "hedge"
//
// The caller's context ending stops the call at once, with an error
// matching ctx.Err(). A Deadline's timer ending it (policy.TimedOut) stops
// new hedges, and the running attempts decide: the first report of an
// attempt that ran fn ends the call, with that attempt's error (ctx.Err()
// for a success), which the Deadline reports as its timeout; if every
// running attempt reports a refusal before fn ran, the call ends as that
// rejection. No attempt wins after the timer: a success after it is
// dropped.
//
// # Panics
//
// An attempt runs on a goroutine of its own, and a panic in it crashes the
// program, as in any goroutine. It is not carried to Do's caller, for
// errgroup's reasons: it would be delayed, lose its stack, and be hidden
// by a caller that recovers. Do may return, with an error, while the panic
// unwinds, as errgroup's Wait may. An attempt that calls runtime.Goexit
// ends the call with an error.
//
// # Telemetry
//
// A Hedge counts each hedge (an attempt after the first) in the counter
// watertight.hedges, with its outcome in watertight.hedge.outcome: "won"
// (its success is the call's), "lost" (another attempt won while it ran),
// "canceled" (the call ended otherwise while it ran) or "failed" (it
// failed before the call ended). As a hedge starts, it adds the event
// watertight.hedge to the span in ctx, with the attempt number and
// watertight.hedge.after_failure, true when a failure, not the delay,
// started it. An exhaustion adds 1 to watertight.retry.exhausted, with
// watertight.policy.kind "hedge". Both counters carry
// watertight.policy.kind and watertight.policy.name. A Hedge starts no
// span.
package hedge

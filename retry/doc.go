// Package retry runs a call again, after a growing wait, when it fails with
// an error worth retrying. Package compose drives a [Retry]'s loop itself,
// running the inner policies once per attempt; [Retry.Execute] runs the
// same loop on its own.
//
// The default schedule is exponential, configured from [Config]: waits of
// 100ms, 200ms, 400ms and so on, each randomised by +-50%
// ([Config.Jitter]) and then capped at [Config.MaxInterval] (10s). A call
// ends on MaxAttempts (3 by default) or on its context, never on the time
// it has taken. An error anywhere in the chain with a method
// RetryAfter() time.Duration returning a positive value (a server's
// Retry-After) sets the next wait exactly, without jitter.
// [Config.NewSchedule] replaces the schedule with a [Schedule] of your own.
// The default schedule is github.com/cenkalti/backoff/v4's
// ExponentialBackOff without its MaxElapsedTime; no backoff type is part
// of this package's API.
//
// # Outcomes
//
// After attempt n fails with err, the first rule that applies decides:
//
//	condition                                  outcome                                      error returned
//	errors.Is(err, policy.ErrRejected),        stop: rejections are never retried           err, unchanged
//	  on attempt 1 (fn never ran)
//	errors.Is(err, policy.ErrRejected),        stop: the call is not a rejection, since     fn's last error
//	  after attempts that ran fn, the call's     fn ran; the context ended it
//	  ctx done
//	errors.Is(err, policy.ErrRejected),        stop, exhausted: the call is not a           *ExhaustedError, Reason "rejected",
//	  after attempts that ran fn                 rejection, since fn ran                      wrapping fn's last error
//	the call's ctx is done                     stop                                         err, unchanged
//	err marked with Permanent                  stop                                         the marked error (unwrapped if the marker is outermost)
//	Config.ShouldRetry(err) == false           stop                                         err, unchanged
//	n >= MaxAttempts                           stop, exhausted                              *ExhaustedError
//	RetryAfter() > MaxInterval                 stop, exhausted, without waiting             *ExhaustedError
//	the Schedule says stop                     stop, exhausted                              *ExhaustedError
//	now + wait would reach ctx's deadline      stop, exhausted, without waiting             *ExhaustedError
//	Config.Budget refuses the retry            stop, exhausted, without waiting             *ExhaustedError, Reason "budget"
//	otherwise                                  wait, then attempt n+1
//	ctx ends during the wait                   stop                                         matches ctx.Err() and err
//
// An [*ExhaustedError] matches [ErrExhausted] and unwraps to the last error
// fn returned. Its message says why, as in
// `retry "llm": gave up after 3 attempts: <last error>`. An attempt that
// timed out on its own deadline (context.DeadlineExceeded while the call's
// ctx is live) is retried by default. Inside fn, [Attempt] returns the
// attempt number.
//
// # Rejections
//
// A rejection means "refused before fn ran" (see package policy). So a
// call's error matches policy.ErrRejected only if fn never ran in that
// call. A Retry takes an attempt's error matching policy.ErrRejected to
// mean that fn did not run in that attempt.
//
// Say a breaker below the Retry refuses attempt n after attempts 1 to n-1
// ran fn and failed. The call ends with an [*ExhaustedError] with Reason
// [ReasonRejected]. It unwraps to fn's last error, so errors.Is and
// errors.As find that error (and an HTTP transport its last failure
// response). It carries the refusal in its Rejection field, outside the
// Unwrap chain, so errors.Is(err, policy.ErrRejected) is false. Attempts is
// n-1, the attempts that ran fn. The message names both, as in
// `retry "llm": gave up after 1 attempt: attempt 2 was rejected (breaker
// "llm" rejected the call: open): <last error>`. It counts as an
// exhaustion; the policy that refused counts its rejection as usual.
//
// If the call's ctx has ended by then (a Deadline's timer ended the
// attempt's wait in a policy below), the call ends with fn's last error, as
// the context's rule has it; an outer Deadline makes that its own timeout.
// Either way, a rejection after attempts that ran fn is never returned
// unchanged.
//
// # Retry budgets
//
// Retries multiply load when a dependency is weakest: with 3 attempts, a
// dependency that fails everything receives 3 times the traffic. A
// [Budget] bounds that. Share one through [Config.Budget] between every
// Retry (and pipeline) that calls the same dependency. Each call deposits
// Ratio of a retry, each retry withdraws one, deposits fade over Window,
// and MinPerSecond retries a second are granted on top. The defaults are
// Finagle's RetryBudget's: Ratio 0.2, Window 10s, MinPerSecond 10.
//
// A retry the budget refuses ends the call at once with an
// [*ExhaustedError] with Reason [ReasonBudget], wrapping fn's last error.
// The budget is asked last, after every other rule has decided to retry,
// so a call that ends for another reason spends nothing. When everything
// fails, attempts per call settle at
// 1 + Ratio + MinPerSecond/(calls per second), whatever MaxAttempts is.
//
// # Hedging
//
// A [Hedge] (built with [NewHedge] from a [HedgeConfig]) cuts the slow
// tail of calls that are safe to repeat. When the first attempt has not
// answered after a delay, it starts another beside it, up to MaxHedges. The
// first success wins at once, and the others are canceled with the cause
// [ErrHedgeLost]. A failed attempt starts the next hedge at once, as
// gRPC's hedging does for a non-fatal status. The delay is fixed
// (HedgeConfig.Delay), or a quantile of the latencies of the last Window
// attempts, at least MinDelay. Every hedge draws on the same [Budget] as
// retries.
//
// A hedge runs around a pipeline, not in one of its slots: [Hedged] runs
// each attempt as a whole call of the policy it is given. So each attempt
// takes its own bulkhead slot, and a hedged call may hold 1 + MaxHedges
// slots at once. Each attempt also gets its own breaker verdict; a loser,
// canceled, is excluded. A bulkhead that refuses a hedge stops the hedging,
// as any rejection does. Hedged returns the winner's value and drops the
// losers'.
//
// After an attempt fails with err, the first rule that applies decides:
//
//	condition                                  outcome                                  error returned
//	errors.Is(err, policy.ErrRejected)         no more hedges; the call ends when        err, unchanged, if no attempt ran fn;
//	                                             the attempts still running end           else *ExhaustedError, Reason "rejected"
//	the call's ctx is done                     stop                                     err, unchanged
//	err marked with Permanent                  stop, the others canceled                the marked error
//	HedgeConfig.ShouldRetry(err) == false      stop, the others canceled                err, unchanged
//	otherwise                                  the next hedge starts at once, if
//	                                             MaxHedges and the budget allow
//	no attempt left running, none to start     stop, exhausted                          *ExhaustedError, Reason "max_attempts"
//	                                                                                      or "budget", Kind "hedge"
//
// The caller's context ending stops the call at once, with an error
// matching ctx.Err() (and the latest failure, if any). A Deadline's timer
// ending it (deadline.Fired) stops new hedges, and the call ends as the
// running attempts report, as a Deadline waits for fn. An attempt that a
// policy below holds until then ends as that policy's rejection, never as
// a timeout. Once the timer has fired, the caller's cancel changes nothing:
// the call still waits for its attempts. Each attempt the timer cuts is a
// timeout of its own, which a breaker counts as a failure.
//
// Each attempt runs in its own goroutine, with a context for which
// [Attempt] returns its number. Hedged returns with the winner without
// waiting for the losers. [Hedge] says how panics in attempts are handled.
//
// Each hedge adds 1 to watertight.hedges with its outcome in
// watertight.hedge.outcome (won, lost, canceled, failed), and a
// watertight.hedge event to the span in ctx. An exhaustion adds 1 to
// watertight.retry.exhausted with watertight.policy.kind = "hedge" and its
// reason. Around a compose pipeline, each attempt is a call of the
// pipeline, with its own call span.
//
// # Permanent errors
//
// [Permanent] marks an error as not to be retried, and [Unmark] takes the
// marker off; a Retry unmarks every error it returns. So the marker stops
// the nearest Retry and no other. A Retry also honours, and takes off, the
// markers of github.com/cenkalti/backoff/v4's Permanent.
//
// # Telemetry
//
// Each retry (each attempt after the first) adds 1 to the
// watertight.retry.attempts counter. It adds a watertight.retry event, with
// the attempt's number and the wait in seconds, to the span in ctx if it is
// recording. Each exhaustion, a rejection after attempts included, adds 1
// to watertight.retry.exhausted, with the ExhaustedError's Reason in the
// watertight.retry.reason attribute ([KeyReason]). Both counters carry
// watertight.policy.kind = "retry" and watertight.policy.name. A Retry
// starts no span of its own.
//
// # Concurrency and cost
//
// A Retry is immutable and needs no lock; a [Budget] it shares guards its
// own state. Each call builds its own state at its first retried failure.
// A call that succeeds at once allocates only its attempt's context, and a
// Budget adds no allocation. A retried call allocates, besides each
// attempt's context, its state once. Waits use a timer and the context's
// Done channel, so cancelling the call ends a wait at once. A wait that
// could not end before the context's deadline is skipped. OnRetry and
// ShouldRetry run on the caller's goroutine, with no lock held.
package retry

// Package retry runs a call again, after a growing wait, when it fails with
// an error worth retrying. Package compose drives a [Retry]'s loop itself,
// with the inner policies run once per attempt, and [Retry.Execute] runs the
// same loop on its own.
//
// The default schedule is exponential, configured from [Config]: waits of
// 100ms, 200ms, 400ms ... times 2 each time, each randomised by +-50%
// ([Config.Jitter]), and every wait capped at [Config.MaxInterval] (10s)
// after randomisation. A call ends on MaxAttempts (3 by default) or on its
// context, never on the time it has taken. An error anywhere in the chain
// with a method RetryAfter() time.Duration returning a positive value (a
// server's Retry-After) sets the next wait exactly, without jitter;
// [Config.NewSchedule] replaces the schedule altogether with a [Schedule] of
// your own. (Underneath, the default schedule is
// github.com/cenkalti/backoff/v4's ExponentialBackOff, with its 15-minute
// MaxElapsedTime switched off; no type of backoff's is part of this
// package's API.)
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
// fn returned, and its message says why, for example
// `retry "llm": gave up after 3 attempts: <last error>`. An attempt that
// timed out on its own deadline (context.DeadlineExceeded while the call's
// ctx is still live) is retried by default. Inside fn, [Attempt] returns the
// attempt number.
//
// # Rejections
//
// A rejection means "refused before fn ran" (see package policy), so the
// error of a call matches policy.ErrRejected only if fn never ran in that
// call. When the policy below the Retry (a breaker, in a compose pipeline)
// refuses attempt n after attempts 1 to n-1 ran fn and failed (the last
// failure opened the breaker, say), the call ends with an [*ExhaustedError]
// with Reason [ReasonRejected]: it unwraps to fn's last error, so errors.Is
// and errors.As find that error (and an HTTP transport finds the last
// failure response), and carries the refusal in its Rejection field, outside
// the Unwrap chain, so that errors.Is(err, policy.ErrRejected) is false.
// Attempts is n-1, the attempts that ran fn; the message names both, as in
// `retry "llm": gave up after 1 attempt: attempt 2 was rejected (breaker
// "llm" rejected the call: open): <last error>`. It is counted as an
// exhaustion; the policy that refused counts its rejection as usual. If the
// call's ctx has ended by then (a Deadline's timer ended the attempt's wait
// in a policy below), the call ends with fn's last error instead, as the
// context's rule has it, and an outer Deadline makes it its own timeout.
// Either way a rejection after attempts that ran fn is never returned
// unchanged. A Retry takes an attempt's error matching policy.ErrRejected
// to mean that fn did not run in that attempt.
//
// # Retry budgets
//
// Retries multiply load exactly when a dependency is weakest: with 3
// attempts, a dependency that fails everything receives 3 times the
// traffic. A [Budget], shared through [Config.Budget] by every Retry (and
// pipeline) that calls the same dependency, bounds that: each call deposits
// Ratio of a retry, each retry withdraws one, deposits fade over Window,
// and MinPerSecond retries a second are granted on top. A retry the budget
// refuses ends the call at once with an [*ExhaustedError] whose Reason is
// [ReasonBudget], wrapping fn's last error; the budget is asked last, after
// every other rule has decided to retry, so a call that ends for another
// reason spends nothing. The defaults and their neighbours:
//
//	             model                                          defaults
//	watertight   deposits of calls, decaying over a window,     Ratio 0.2, Window 10s, MinPerSecond 10
//	             plus a floor of retries per second
//	Finagle      RetryBudget: deposits over a ttl window,       percentCanRetry 0.2, ttl 10s,
//	             plus a floor of retries per second             minRetriesPerSec 10
//	Envoy        retry_budget: retries in flight vs requests    budget_percent 20%, min_retry_concurrency 3
//	             active and pending
//	gRPC         retryThrottling: a token bucket, -1 per        maxTokens (<= 1000), tokenRatio; no default
//	             failure, +tokenRatio per success, no retries
//	             while at or below half of maxTokens
//	failsafe-go  budget: retries and hedges in flight vs        maxRate 0.2, minConcurrency 3
//	             executions in flight
//
// Watertight follows Finagle: a budget over calls rather than over
// concurrency, because an outage makes attempts fail fast while waits
// between them are long, so few retries are in flight at any instant and a
// concurrency budget lets nearly all of them through; and counting calls,
// not successes (gRPC), keeps a budget meaningful for a client whose calls
// all fail. When everything fails, attempts per call settle at
// 1 + Ratio + MinPerSecond/(calls per second), whatever MaxAttempts is.
//
// # Hedging
//
// A [Hedge] (built with [NewHedge] from a [HedgeConfig]) cuts the slow
// tail of calls that are safe to repeat, rather than the failures: when
// the first attempt has not answered after a delay, it starts another
// beside it, up to MaxHedges; the first success wins at once, and the
// others are canceled, their contexts' cause being [ErrHedgeLost]. A
// failed attempt starts the next hedge at once, as gRPC's hedging does
// for a non-fatal status. The delay is fixed (HedgeConfig.Delay), or
// learned: a quantile of the latencies of the last Window attempts, at
// least MinDelay, kept in a ring of fixed size. Every hedge draws on the
// same [Budget] as retries.
//
// A hedge runs around a pipeline, not in one of its slots: [Hedged] runs
// each attempt as a whole call of the policy it is given. So each attempt
// takes its own bulkhead slot (a hedged call may hold 1 + MaxHedges slots
// at once: size the bulkhead for it), and its own breaker verdict (a
// loser, canceled, is excluded). A bulkhead that refuses a hedge stops
// the hedging, as any rejection does. Hedged returns the winner's value;
// the losers' values are dropped.
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
// and the caller's context ending stops the call at once, with an error
// matching ctx.Err() (and the latest failure, if any). A Deadline's timer
// ending it (deadline.Fired) stops new hedges, and the call ends as the
// attempts running report, as a Deadline waits for fn: an attempt held by
// a policy below until then ends as that policy's rejection, never as a
// timeout. Once the timer has fired, the caller's cancel changes nothing:
// the call still waits for its attempts. Each attempt the timer cuts is a
// timeout of its own, which a breaker counts as a failure. Each attempt
// runs in a goroutine of its own, with a context for which [Attempt]
// returns its number. Hedged returns with the winner without waiting for
// the losers: one that ignores its context runs on until fn returns. A
// panic in an attempt that ends before the call has its outcome is
// carried to the caller (the call panics, the other attempts canceled); a
// panic in a losing attempt after the call has its outcome has no caller
// left to carry it to, and crashes the program, as a panic in any
// goroutine does: fn must not panic on its way out of a canceled attempt
// (see [Hedge]).
//
// Telemetry: each hedge adds 1 to watertight.hedges with its outcome in
// watertight.hedge.outcome (won, lost, canceled, failed) and a
// watertight.hedge event to the span in ctx; an exhaustion adds 1 to
// watertight.retry.exhausted with watertight.policy.kind = "hedge" and its
// reason. Around a compose pipeline, each attempt is a call of the
// pipeline, with a call span of its own.
//
// # Permanent errors
//
// [Permanent] marks an error as not to be retried; [Unmark] takes the
// marker off, and a Retry does so on every error it returns. A marker that
// a policy's error wraps (an attempt deadline's) cannot be taken off: the
// error is returned in a wrapper that keeps its message and that errors.Is
// and errors.As see through, so that the marker stops the nearest Retry and
// no other, and a Retry further out (around a whole request and the
// reading of its body, say) sees the error as any other. No error is
// modified once returned. A Retry also honours
// (and takes off) the markers of github.com/cenkalti/backoff/v4's
// Permanent, so errors marked for backoff keep working.
//
// # Telemetry
//
// Each retry (each attempt after the first) adds 1 to the
// watertight.retry.attempts counter and a watertight.retry event, with the
// attempt's number and the wait in seconds, to the span in ctx if it is
// recording; each exhaustion, a rejection after attempts included, adds 1 to
// watertight.retry.exhausted, with the ExhaustedError's Reason in the
// watertight.retry.reason attribute ([KeyReason]). Both counters carry
// watertight.policy.kind = "retry" and watertight.policy.name. Retry starts
// no span of its own.
//
// # Concurrency and cost
//
// A Retry holds no mutable state of its own (a [Budget] it shares guards
// its own), so it needs no lock: every call builds its own state (its
// schedule, which is not shared, and the error of its latest attempt), and
// only at its first failure that is retried, so a call that succeeds at
// once allocates only the attempt's context (context.WithValue); a call
// that is retried allocates, besides each attempt's context, its state once
// (the default schedule lives inside it). With a [Budget], a call that
// succeeds at once adds one atomic update (its deposit: on a shared
// counter, or, once deposits from several cores have collided, on a
// counter of its processor's) and reads no clock, unless it is the first
// deposit of a tick (see [Budget]), which also holds the budget's mutex;
// each retry reads the clock and holds the budget's mutex for a few
// arithmetic operations. Waits use a timer and the context's Done channel,
// so cancelling the call ends a wait at once; the wait is skipped when it
// could not end before the context's deadline, rather than sleeping into
// it. OnRetry and ShouldRetry run on the caller's goroutine, with no lock
// held.
package retry

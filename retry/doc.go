// Package retry runs a call again, after a growing wait, when it fails
// with an error worth retrying. [Retry.Execute] runs the attempts; package
// compose drives them through [Retry.Start].
//
// The default schedule is exponential: waits of 100ms, 200ms, 400ms and so
// on, each randomised by ±50%, then capped at 10s (see [Config]). A call
// ends after MaxAttempts attempts or when its context ends, never on
// elapsed time. An error in the chain with a method
// RetryAfter() time.Duration that returns a positive value sets the next
// wait, without jitter. [Config.NewSchedule] replaces the schedule.
//
// # Outcomes
//
// After attempt n fails with err, the first rule that applies decides:
//
//	condition                                  outcome                        error returned
//	errors.Is(err, policy.ErrRejected),        stop                           err
//	  no earlier attempt ran fn
//	errors.Is(err, policy.ErrRejected),        stop, exhausted                *ExhaustedError, Reason "rejected"
//	  an earlier attempt ran fn, even if
//	  ctx is done
//	the call's ctx is done                     stop                           err
//	err marked with policy.Permanent, or       stop                           err
//	  matching policy.ErrQuotaSpent
//	Config.ShouldRetry(err) == false           stop                           err
//	n >= MaxAttempts                           stop, exhausted                *ExhaustedError
//	RetryAfter() > MaxInterval                 stop, exhausted, no wait       *ExhaustedError
//	the schedule stops (backoff.Stop)          stop, exhausted                *ExhaustedError
//	now + wait would reach ctx's deadline      stop, exhausted, no wait       *ExhaustedError
//	Config.Budget refuses the retry            stop, exhausted, no wait       *ExhaustedError, Reason "budget"
//	otherwise                                  wait, then attempt n+1
//	ctx ends during the wait                   stop                           matches ctx.Err() and err
//
// A Deadline returns an [*ExhaustedError] unchanged, not as a timeout: the
// retry gave up while the call's ctx was live. A policy below that waits (a
// rate limit) ends a later attempt's wait that a Deadline's timer ends with
// ctx.Err(), not a rejection: fn ran in the call, which is a timeout. A
// call's error matches policy.ErrRejected only if fn never ran in that
// call: a refusal after attempts that ran fn is in the ExhaustedError's
// Rejection field, outside the Unwrap chain. An attempt that timed out on
// its own deadline, while the call's ctx is live, is retried by default.
// Inside fn, [Attempt] returns the attempt's number.
//
// # Permanent errors
//
// [policy.Permanent] marks an error as not to be retried. A Retry or
// hedge.Hedge takes the marker off every error it returns (see
// [policy.Unmark]), so a marker stops the nearest one only. The markers of
// github.com/cenkalti/backoff/v4's Permanent work the same way.
//
// # Budgets
//
// A [Budget] bounds the retries of the Retries and hedge.Hedges that share
// it. Each call deposits Ratio of a retry, and each retry withdraws one.
// The budget is asked last, so a call that ends for another reason spends
// nothing. When everything fails, attempts per call settle at about
// 1 + Ratio + MinPerSecond/(calls per second), or fewer.
//
// # Changing settings
//
// [Retry.Update] changes MaxAttempts, InitialInterval, MaxInterval and
// Jitter while the Retry is in use; [Retry.Config] returns the Config in
// force. A call reads the settings once, when it starts: a call in
// progress, in an attempt or in a wait, ends with the settings it started
// with. Name, MeterProvider, Budget and the hooks stay New's, and so does
// the Budget's balance.
//
// # Telemetry
//
// Each retry adds 1 to watertight.retry.attempts, and a watertight.retry
// event (attempt number, wait in seconds) to the span in ctx. Each
// exhaustion adds 1 to watertight.retry.exhausted, with its Reason in
// watertight.retry.reason. Both carry watertight.policy.kind and
// watertight.policy.name. A Retry starts no span.
package retry

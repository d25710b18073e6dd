// Package retry runs a call again, after a growing wait, when it fails with
// an error worth retrying. Package compose drives a [Retry]'s loop itself,
// with the inner policies run once per attempt, and [Retry.Execute] runs the
// same loop on its own.
//
// The schedule is github.com/cenkalti/backoff/v4's ExponentialBackOff,
// configured from [Config]: by default waits of 100ms, 200ms, 400ms ...
// times 2 each time, each randomised by +-50% ([Config.Jitter]), and every
// wait capped at [Config.MaxInterval] (10s) after randomisation, which
// backoff itself does not do. backoff's 15-minute MaxElapsedTime is switched
// off: a call ends on MaxAttempts (3 by default) or on its context. An error
// anywhere in the chain with a method RetryAfter() time.Duration returning a
// positive value (a server's Retry-After) sets the next wait exactly, without
// jitter; [Config.NewBackOff] replaces the schedule altogether.
//
// # Outcomes
//
// After attempt n fails with err, the first rule that applies decides:
//
//	condition                                  outcome                                      error returned
//	the call's ctx is done                     stop                                         err, unchanged
//	errors.Is(err, policy.ErrRejected)         stop: rejections are never retried           err, unchanged
//	err marked with Permanent                  stop                                         the marked error (unwrapped if the marker is outermost)
//	Config.ShouldRetry(err) == false           stop                                         err, unchanged
//	n >= MaxAttempts                           stop, exhausted                              *ExhaustedError
//	RetryAfter() > MaxInterval                 stop, exhausted, without waiting             *ExhaustedError
//	the schedule returns backoff.Stop          stop, exhausted                              *ExhaustedError
//	now + wait would reach ctx's deadline      stop, exhausted, without waiting             *ExhaustedError
//	otherwise                                  wait, then attempt n+1
//	ctx ends during the wait                   stop                                         matches ctx.Err() and err
//
// An [*ExhaustedError] matches [ErrExhausted] and unwraps to the last
// attempt's error, and its message says why, for example
// `retry "llm": gave up after 3 attempts: <last error>`. An attempt that
// timed out on its own deadline (context.DeadlineExceeded while the call's
// ctx is still live) is retried by default. Inside fn, [Attempt] returns the
// attempt number.
//
// # Telemetry
//
// Each retry (each attempt after the first) adds 1 to the
// watertight.retry.attempts counter and a watertight.retry event, with the
// attempt's number and the wait in seconds, to the span in ctx if it is
// recording; each exhaustion adds 1 to watertight.retry.exhausted. Both
// counters carry watertight.policy.kind = "retry" and
// watertight.policy.name. Retry starts no span of its own.
//
// # Concurrency and cost
//
// A Retry holds no mutable state, so it needs no lock: every call builds its
// own backoff (backoff's types are not safe to share), and only after an
// attempt has failed, so a call that succeeds at once allocates only the
// attempt's context (context.WithValue). Waits use a timer and the context's
// Done channel, so cancelling the call ends a wait at once; the wait is
// skipped when it could not end before the context's deadline, rather than
// sleeping into it. OnRetry and ShouldRetry run on the caller's goroutine,
// with no lock held.
package retry

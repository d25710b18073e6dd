// Package deadline bounds how long one call may take. A [Deadline] runs fn
// with a context that is done after [Config.Timeout]. It reports a call
// cut short by it as an error matching [ErrExceeded].
//
// The timeout is cooperative: fn runs on the caller's goroutine, and
// Execute returns when fn returns. fn must watch ctx.Done for the deadline
// to cut it short. Execute starts no goroutine.
//
// # Outcomes
//
//	what happened                         Execute returns                 recorded
//	------------------------------------  ------------------------------  ----------------------------
//	fn returned nil                       nil                             -
//	fn returned err, our timer not fired  err, unchanged                  -
//	fn returned a rejection               the rejection, unchanged        -
//	(policy.ErrRejected) or a retry's
//	exhaustion (retry.ErrExhausted)
//	our timer fired, fn returned err      *ExceededError wrapping err:    watertight.timeouts counter,
//	                                      matches ErrExceeded and         watertight.timeout span event,
//	                                      context.DeadlineExceeded        Config.OnTimeout
//	our timer fired, fn returned nil      nil (fn finished its work)      -
//	caller canceled, or its own deadline  fn's error, unchanged (usually  -
//	came first                            ctx.Err()), never ErrExceeded
//	fn panicked or called runtime.Goexit  the panic goes on up; the       -
//	                                      timer is released
//
// The first row that applies decides. "Our timer fired" is read from the
// cause of fn's context, not guessed from fn's error. Once the timer has
// fired, errors.Is(context.Cause(ctx), ErrExceeded) is true in fn, and the
// cause names the Deadline.
//
// # Changing settings
//
// [Deadline.Update] changes the Timeout while calls run. A call keeps the
// timeout it started with, in its context and in its error; calls that
// start after the update get the new one.
//
// # Telemetry
//
// A timeout increments the watertight.timeouts counter with the attributes
// watertight.policy.kind = "deadline" and watertight.policy.name =
// Config.Name. It adds a watertight.timeout event to the span already in
// ctx if it is recording. A Deadline never starts a span. Recording a
// timeout allocates nothing.
package deadline

// Package deadline bounds how long one call may take. A [Deadline] runs fn
// with a context that is done after [Config.Timeout], and reports a call
// cut short by it as an error matching [ErrExceeded].
//
// The timeout is cooperative. fn runs on the caller's goroutine with a
// context carrying the deadline, and Execute returns when fn returns, never
// before. So fn must watch ctx.Done, as every policy.Func must, for the
// deadline to cut it short. Execute starts no goroutine and never abandons
// fn, which would go on using the caller's memory after the caller moved
// on.
//
// A Deadline sets no timer when the caller's own deadline is as soon as,
// or sooner than, now + Timeout: fn then runs with the caller's context
// itself. Nor does it set one when now + Timeout lies past the year 2262,
// beyond int64 nanoseconds: such a timeout never fires.
//
// # Outcomes
//
//	what happened                         Execute returns                 recorded
//	------------------------------------  ------------------------------  ----------------------------
//	fn returned nil                       nil                             -
//	fn returned err, our timer not fired  err, unchanged                  -
//	fn returned a rejection               the rejection, unchanged        -
//	(policy.ErrRejected)
//	our timer fired, fn returned err      *ExceededError wrapping err:    watertight.timeouts counter,
//	                                      matches ErrExceeded and         watertight.timeout span event,
//	                                      context.DeadlineExceeded        Config.OnTimeout
//	our timer fired, fn returned nil      nil (fn finished its work)      -
//	caller canceled, or its own deadline  fn's error, unchanged (usually  -
//	came first                            ctx.Err()), never ErrExceeded
//	fn panicked or called runtime.Goexit  the panic goes on up; the       -
//	                                      timer is released
//
// A timeout is not a rejection: fn ran. When fn returns a rejection (a
// policy inside it refused the call), Execute returns it unchanged, even if
// the timer fired. The first row that applies decides, so a call ends in
// exactly one row.
//
// Whether "our timer fired" is decided from the cause of the context given
// to fn (context.Cause), not guessed from the error fn returned. fn can do
// the same: once the timer has fired, errors.Is(context.Cause(ctx),
// ErrExceeded) is true, and the cause names the Deadline. A cancellation
// or deadline of the caller's passes through untouched.
//
// # Telemetry
//
// A timeout increments the watertight.timeouts counter with the attributes
// watertight.policy.kind = "deadline" and watertight.policy.name =
// Config.Name. It adds a watertight.timeout event to the span already in
// ctx if it is recording. A Deadline never starts a span. Recording a
// timeout allocates nothing.
//
// # Concurrency
//
// A Deadline is immutable after New and holds no lock. Each call's state
// is the context it creates, whose timer is released when the call ends,
// fn's panic included. The success path costs what
// context.WithDeadlineCause costs. When no timer is needed, it costs one
// clock reading and no allocation.
package deadline

// Package policy defines the contract every watertight policy follows,
// and the classes of outcome they share. A [Policy] wraps a [Func]. A
// rejection, a call refused before fn ran, is an error that matches
// [ErrRejected]; a throttle matches [ErrThrottled], a spent quota
// [ErrQuotaSpent], a timeout of a policy [ErrTimeout], and an error marked
// with [Permanent] is not retried.
//
// # Writing a Policy
//
// An Execute method must:
//
//   - panic if ctx or fn is nil, with a message naming its package;
//   - call fn at most once per admitted call, with ctx or a context derived
//     from it (a retrying policy may call it again, after the previous call
//     has returned);
//   - never start fn after Execute has returned, so fn never runs
//     concurrently with itself;
//   - return only after every call of fn it started has returned;
//   - never retain ctx or fn after Execute returns;
//   - return fn's error, or an error that wraps it with %w;
//   - report a refusal to run fn as an error matching ErrRejected, ideally
//     a [*RejectedError] built with [NewRejectedError], and count it;
//   - free whatever it holds if fn panics or calls runtime.Goexit, and let
//     the panic propagate;
//   - hold no lock while fn runs, and call user callbacks outside its locks.
//
// Such a type can take a slot in a compose pipeline. To run attempts
// concurrently, use hedge.Do: each attempt is a whole run of a Policy.
package policy

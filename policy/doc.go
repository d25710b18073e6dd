// Package policy defines the contract every watertight policy follows. A
// [Policy] wraps a [Func]. A rejection, a call refused before fn ran, is
// reported as a [*RejectedError] that matches [ErrRejected] with
// [errors.Is].
//
// The built-in policies live in their own packages (bulkhead, deadline,
// retry, breaker), and package compose chains them in a fixed order. Any
// type with an Execute method can take a slot in a compose pipeline, if it
// keeps this contract.
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
// # Concurrent attempts (hedging)
//
// A hedge runs a call again beside a slow attempt. It is not a Policy in a
// pipeline: retry.Hedged runs each attempt as a whole run of a Policy, so
// each attempt takes its own bulkhead slot and breaker verdict. Within each
// attempt, fn still runs one call at a time.
//
// A user-written policy is called through Execute. That costs one
// allocation per call (per attempt, below a retry) unless it is in the
// innermost slot.
package policy

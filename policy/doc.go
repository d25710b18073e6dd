// Package policy defines the contract every watertight policy follows: a
// [Policy] wraps a [Func], and a rejection (a call refused before fn ran) is
// reported as a [*RejectedError] that matches [ErrRejected] with [errors.Is].
//
// The built-in policies live in their own packages (bulkhead, deadline,
// retry, breaker) and are chained in a fixed order by package compose. Any
// type with an Execute method can take a slot in a compose pipeline; this
// page is the contract such a user-written policy must keep.
//
// # Writing a Policy
//
// An Execute method must:
//
//   - panic if ctx or fn is nil, with a message naming its package, as the
//     standard library does: a nil context is a programmer error;
//   - call fn at most once per admitted call (a retrying policy may call it
//     again, each time after the previous call has returned), with ctx or a
//     context derived from it, and never after Execute has returned: the
//     caller may reuse everything fn refers to;
//   - never retain ctx or fn after Execute returns;
//   - return fn's error, or an error that wraps it with %w, so callers can
//     still inspect it with [errors.Is] and [errors.As];
//   - report a refusal to run fn as an error for which
//     errors.Is(err, ErrRejected) holds, ideally a [*RejectedError] built
//     with [NewRejectedError], and count it (every rejection must be
//     visible: see the telemetry section of the README);
//   - free whatever it holds if fn panics or calls runtime.Goexit, and let
//     the panic propagate;
//   - hold no lock while fn runs, and call user callbacks outside its locks.
//
// # Two-phase policies
//
// Wrapping a call costs one closure per level when each level calls the
// next through Execute, because the closure escapes through the Policy
// interface. A policy that only needs to act before and after fn can also
// implement [Stage] (Enter, then Exit with the outcome); a policy that runs
// fn several times can implement [Repeater]. Package compose uses these
// optional interfaces where present, so a pipeline of built-in policies
// allocates no closure per call, and falls back to Execute otherwise. [Run]
// and [Repeat] are the reference executions of the two interfaces: a
// Stage's or Repeater's Execute must behave exactly as they do.
package policy

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
//     again, each time after the previous call has returned), with ctx or
//     a context derived from it, and never start it after Execute has
//     returned: fn never runs concurrently with itself;
//   - return only after every call of fn it started has returned, so that
//     the caller may reuse everything fn refers to;
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
// # Concurrent attempts (hedging)
//
// A hedge runs a call again beside a slow attempt. It is no Policy in a
// pipeline: retry.Hedged runs each attempt as a whole run of a Policy (a
// pipeline), so that each attempt takes its own bulkhead slot and breaker
// verdict, and returns the winner's value. Within each attempt, fn still
// runs one call at a time.
//
// # Why Execute is the whole contract
//
// A Policy has one method. The built-in policies also run in two phases
// (act before fn, act after fn) so that package compose can chain them
// without a closure per level, but that two-phase interface is internal to
// this module, not part of this contract, and decided so on purpose: it is
// still moving (an adaptive limit needs each attempt's latency reported
// from below), and a public interface with opaque tokens would freeze it
// before anyone could depend on it safely.
// Nothing is lost to a user-written policy but speed: compose calls it
// through Execute, which costs one closure (one allocation) per call (per
// attempt, below a retry) when it is not the innermost slot, and nothing
// when it is.
package policy

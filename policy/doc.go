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
//     again, each time after the previous call has returned; a hedging
//     policy may call it again while earlier calls still run: see below),
//     with ctx or a context derived from it, and never start it after
//     Execute has returned;
//   - return only after every call of fn it started has returned, so that
//     the caller may reuse everything fn refers to, except for the losing
//     attempts of a hedge (below);
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
// A policy for calls that are safe to repeat may run fn concurrently with
// itself: after a delay with no answer, it starts another attempt beside
// the first (retry.Hedge does). Such a policy must
//
//   - give each attempt a context made with [WithClaimer], whose Claimer
//     grants the claim to one attempt at most at a time, and make the
//     attempt that claimed the call's outcome when it succeeds;
//   - cancel every other attempt's context once the call has its outcome,
//     and return at once, without waiting for them: an attempt that
//     ignores its context may still be running after Execute returned,
//     and frees what it holds when it returns;
//   - carry a panic (or runtime.Goexit) of an attempt's fn to the caller's
//     goroutine while Execute has not returned.
//
// So a Func given to such a policy, or to a pipeline holding one, may run
// concurrently with itself, and a losing attempt may outlive the call: it
// must publish nothing the caller reads unless [Claim] says it won. [Do]
// does exactly that, so fn passed to Do needs no care; code that fills a
// variable from fn directly must either use Do or check Claim.
//
// A policy that never runs fn concurrently with itself may say so by
// implementing [Concurrent] (retry.Retry and compose.Pipeline do, the
// latter from its slots): Do then publishes without looking for a claim.
//
// # Why Execute is the whole contract
//
// A Policy has one method. The built-in policies also run in two phases
// (act before fn, act after fn) so that package compose can chain them
// without a closure per level, but that two-phase interface is internal to
// this module, not part of this contract, and decided so on purpose: it is
// still moving (hedged attempts run side by side, an adaptive limit needs
// each attempt's latency reported from below), and a public interface with
// opaque tokens would freeze it before anyone could depend on it safely.
// Nothing is lost to a user-written policy but speed: compose calls it
// through Execute, which costs one closure (one allocation) per call (per
// attempt, below a retry) when it is not the innermost slot, and nothing
// when it is.
package policy

// Package stage holds the two-phase contract that this module's policies
// and package compose share, so that a pipeline of built-in policies runs
// without a closure per level.
//
// It is internal on purpose. Wrapping a call costs one closure per level
// when each level calls the next through Execute, because the closure
// escapes through the [policy.Policy] interface. A policy that only acts
// before and after fn can instead implement [Stage] (Enter, then Exit with
// the outcome), and one that runs fn several times [Repeater]; compose uses
// them where present. Those interfaces are still moving (hedging runs
// attempts side by side, adaptive limits report per-attempt latency from
// below), so they are not offered to users: a user-written policy
// implements policy.Policy alone and costs compose one closure per call.
// Their token type, [Token], is declared here so that a user type cannot
// satisfy them by accident (its methods cannot name it); nested modules of
// this repository (whose import paths lie under the module root) may use
// them.
package stage

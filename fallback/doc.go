// Package fallback runs alternatives in order until one succeeds: "OpenAI,
// else Anthropic". [Do] runs each [Alternative] under its own policy, and
// moves on to the next after a failure that [Config.ShouldFallback]
// accepts. By default that is a rejection, a watertight timeout, an
// exhausted retry, a throttled answer or a spent quota. The caller's context bounds every
// alternative together: its end stops Do at once.
//
// An alternative whose fn has handed part of its answer on, such as a
// streamed chunk, must not be followed by another. fn says so by calling
// [MarkDelivered] with its ctx. A failure after that ends Do with that
// failure, marked permanent for the alternative's own policy, so that its
// retry does not repeat the attempt either.
//
// Do returns the value of the first alternative that succeeds, or an
// [*Error] listing every alternative tried, with its error.
//
// # Telemetry
//
// Each move from one alternative to the next adds 1 to the
// watertight.fallbacks counter, and a watertight.fallback event to the span
// in ctx. Both carry watertight.policy.kind "fallback",
// watertight.policy.name (Config.Name), watertight.fallback.from and
// watertight.fallback.to (the alternatives' names), and
// watertight.fallback.reason (the failure's error.type). Do starts no span.
package fallback

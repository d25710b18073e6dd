// Package fallback runs alternatives in order until one succeeds: "OpenAI,
// else Anthropic". [Do] tries each [Alternative] under its own policy, such
// as a watertight pipeline per provider. It moves on to the next when the
// failure is one that another provider may not share, as
// [Config.ShouldFallback] decides. By default that is a rejection (an open
// breaker, a full bulkhead, a rate-limit hold that cannot fit), a
// watertight timeout, an exhausted retry or a throttled answer (a 429). The
// caller's own cancellation, or its deadline passing, ends Do at once: the
// caller's context bounds every alternative together.
//
// # Never after part of an answer
//
// An alternative whose fn has handed part of its answer on (a streamed
// chunk written to the user) must not be followed by another: duplicated
// tokens are worse than an error. fn says so by calling [MarkDelivered]
// with its ctx as soon as it has delivered anything. A failure after that
// ends Do with that failure. It is also marked permanent for the
// alternative's own policy, so that a retry inside it does not repeat the
// attempt either.
//
// # Outcome
//
// Do returns the value of the first alternative that succeeds. Otherwise
// it returns an [*Error] listing every alternative tried, in order, with
// its error, and why it stopped ([StopExhausted], [StopNoFallback],
// [StopCanceled], [StopDelivered]). The Error unwraps to each
// alternative's error, so errors.Is and errors.As find any of them.
//
// # Telemetry
//
// Each move from one alternative to the next adds 1 to the
// watertight.fallbacks counter. Its attributes are watertight.policy.kind
// "fallback", watertight.policy.name (Config.Name),
// watertight.fallback.from and watertight.fallback.to (the alternatives'
// names), and watertight.fallback.reason (the failure's error.type:
// "rejected", "timeout", "retry_exhausted", an HTTP status...). Each move
// also adds a watertight.fallback event with the same attributes to the
// span in ctx if it is recording. Do starts no span.
package fallback

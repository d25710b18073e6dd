// Package compose chains watertight policies around a call in one fixed,
// documented order, with one OpenTelemetry span per call.
//
// # The order
//
// A [Pipeline] runs the slots of [Policies] outermost first:
//
//	caller
//	  │
//	  ▼
//	Bulkhead ─── full or waited too long: rejected at once, nothing else runs
//	  │  (one slot held for the whole call, every retry and wait included)
//	  ▼
//	Deadline ─── the budget for the whole call: every attempt and every wait
//	  │          (time queued in the bulkhead is not counted: MaxWait bounds it)
//	  ▼
//	Retry ────── repeats what is below; stops on a rejection, a permanent error,
//	  │   ▲      the caller's cancellation, or when the budget is spent
//	  ▼   │ attempt failed
//	RateLimit ── optional: holds each attempt while the provider says its quota is
//	  │          spent (the hold keeps the bulkhead slot); too long: rejected
//	  ▼
//	Breaker ──── sees every attempt; once open, it rejects and the retry stops
//	  │
//	  ▼
//	Attempt ──── optional per-attempt timeout: retried, and a breaker failure
//	  │
//	  ▼
//	  fn
//
// Why this order:
//   - A rejected call costs nothing: the bulkhead is outermost, so a call it
//     refuses starts no timer, no retry loop and no breaker bookkeeping, and a
//     breaker rejection is never retried (rejections end the loop).
//   - The Deadline bounds the call as the caller sees it: all attempts and the
//     backoff waits between them. It starts once the bulkhead has admitted the
//     call, so time queued in the bulkhead is bounded by the bulkhead's own
//     MaxWait (and the caller's ctx), not by the Deadline. When it fires, the
//     retry loop ends because its ctx is done, and the call returns an error
//     matching deadline.ErrExceeded (wrapping fn's last error); or, if fn
//     never ran (the attempt was held in the RateLimit), the RateLimit's
//     rejection.
//   - The RateLimit sits inside the retry so that every attempt, retries
//     included, waits out the provider's hold (package ratelimit), and
//     outside the breaker so that a held attempt does not hold a half-open
//     probe's place. A held attempt keeps its bulkhead slot.
//   - The Breaker sits inside the retry so that it judges each attempt: three
//     failed attempts are three failures, and once it opens, the next attempt
//     is rejected and the retry loop ends at once.
//   - The Attempt timeout sits innermost so that a slow attempt is cut,
//     counted by the breaker as a failure, and retried while the whole-call
//     budget lasts. [New] rejects an Attempt timeout longer than the Deadline.
//
// Every slot is optional (nil slots are skipped) and takes any
// [policy.Policy]. The policies of this module are a closed set, found by
// their types: compose takes and frees their holds in two steps
// (bulkhead.Bulkhead.Acquire, breaker.Breaker.Allow, deadline.Deadline.Start,
// ratelimit.Limiter.Wait, adaptive.Limiter.Acquire), and runs a Retry's
// attempts with retry.Retry.Start. Any policy of another package runs
// through its Execute, with what is below it as fn. A hedge runs whole calls: wrap the pipeline with retry.Hedged rather
// than putting it in a slot.
//
// # Hand-over
//
// [Pipeline.Start] runs a call that may outlive it, such as an HTTP
// response whose body the caller reads later. fn returns [ErrHandOver] to
// hand the call over; every policy of this module then keeps its hold
// until [Held.End] gives the call's outcome. A handed-over attempt is not
// retried. A policy of another package
// sees the same success, and frees its hold then ([Pipeline.Holds]
// reports whether a pipeline has one).
//
// # Telemetry
//
// Each call through a Pipeline starts one span, "watertight " + name, with
// the attribute watertight.pipeline.name. While that span is recording, each
// retry attempt gets a child span with watertight.retry.attempt. Rejections
// add a watertight.rejected event (with kind, name and reason) and timeouts a
// watertight.timeout event to the innermost span; a failed call sets the
// span's status to Error with error.type. The histogram
// watertight.call.duration (seconds) records each call, with error.type on
// failure. When no SDK is installed (the default global providers, or no-op
// ones passed as options) the pipeline itself starts no span
// and reads no clock (a Deadline in a slot still reads it once per call).
package compose

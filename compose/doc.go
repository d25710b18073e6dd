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
//	Route ────── optional: picks one of N equivalent endpoints for the attempt,
//	  │          avoiding those the call tried; the three slots below are then
//	  │          the endpoint's own, and their refusal sends the attempt on to
//	  │          another endpoint
//	  ▼
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
// The bulkhead is outermost, so a call it refuses costs nothing more. A
// rejection is never retried. [New] rejects an Attempt timeout longer than
// the Deadline, and a Route beside a RateLimit, Breaker or Attempt of the
// pipeline's own.
//
// With a Route (package route), an attempt refused by its endpoint's
// RateLimit, Breaker or MaxConcurrent goes on at once to another endpoint,
// as does one whose fn returned policy.ErrQuotaSpent while another
// endpoint is in: that quota is the endpoint's. A retry, and each attempt
// of a hedge around the pipeline, avoids the endpoints the call has tried
// while another is in.
//
// Every slot is optional and takes any [policy.Policy]. The policies of
// this module are found by their types and entered in two steps; any other
// policy runs through its Execute, with what is below it as fn. A
// keyed.Group in a slot (a breaker per host, say) is entered as the policy
// of the call's key, which it holds until that policy's hold ends. A hedge
// runs whole calls: wrap the pipeline with hedge.Do.
//
// # Hand-over
//
// [Pipeline.Start] runs a call that may outlive it, such as an HTTP
// response whose body the caller reads later. fn returns [ErrHandOver] to
// hand the call over. Every policy of this module then keeps its hold
// until [Held.End] gives the call's outcome. A handed-over attempt is not
// retried. A policy of another package keeps its hold too: under Start, its
// Execute runs on a goroutine of its own, whose fn waits there for the
// outcome.
//
// # Telemetry
//
// Each call starts one span, "watertight " + name, with the attribute
// watertight.pipeline.name. While it records, each retry attempt gets a
// child span with watertight.retry.attempt. Rejections add a
// watertight.rejected event and timeouts a watertight.timeout event to the
// innermost span. A failed call sets the span's status to Error with
// error.type. The histogram watertight.call.duration (seconds) records
// each call, with error.type on failure. Without an SDK installed, the
// pipeline starts no span and reads no clock.
package compose

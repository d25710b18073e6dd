// Package httppolicy puts watertight policies on HTTP. [Transport] runs
// a client's requests through a [policy.Policy], usually a
// *compose.Pipeline. [Handler] runs a server's requests through one.
//
// # Client side: one call per exchange
//
// [Transport.RoundTrip] runs one call of the Policy per request, on the
// caller's goroutine: through the Policy's Start if it has one (a
// *compose.Pipeline, or a type that embeds one), else through a pipeline
// with the Policy in a slot. The call lasts for the whole exchange, body
// included. The caller gets the response once its headers are in. The
// bulkhead slot stays taken, and the deadline's context live, until the
// body is read to EOF or closed, or else until the request's context or
// the Deadline ends: always close it. EOF and an early Close are
// successes. A failed Read is a failure. The end of the attempt's context
// ends the call too. The final Read and Close return once the policies
// have judged the call. Once the response is handed over, nothing is
// retried. A pipeline's Attempt bounds each attempt, its stream included:
// leave it unset, or long, when streaming.
//
// A policy of another package holds what it took (a lease, a slot) until
// the body ends too: compose runs its Execute on a goroutine of its own.
// A panic before the hand-over goes up RoundTrip's caller. A panic in a
// policy after it is reported to otel.Handle. Hooks must not call
// runtime.Goexit.
//
// # Client side: stream timeouts
//
// [Transport.FirstByteTimeout] bounds each attempt's wait for the first
// byte of the body. RoundTrip hands the response over only once it is
// in, so a late first byte is a failure that may be retried.
// [Transport.IdleTimeout] bounds the Reads of the body handed over: its
// timer runs only while a Read waits. When it fires, the call fails and
// is not retried. [WithStreamTimeouts] sets both for one request. Neither
// watches a 101 Switching Protocols connection.
//
// For a text/event-stream response that is not encoded, only events
// count. Comment lines, events without data and events whose type is in
// [Transport.KeepaliveEvents] are keepalives. Their waits add up toward
// the idle timeout. An event with more than 4 KiB of data counts,
// whatever its type. With a first byte timeout, more than 1 MiB of
// keepalives before the first event fails the attempt. So does an event
// that grows past 1 MiB before it counts.
//
// The errors match [ErrFirstByteTimeout] or [ErrIdleTimeout]. They are
// counted in watertight.timeouts, with watertight.policy.kind first_byte
// or idle.
//
// When a context ends the stream, the failing Read returns the error
// the call ended with: a Deadline gives a *deadline.ExceededError, the
// caller's cancellation context.Canceled. The error carries no
// policy.Permanent marker.
//
// # Client side: outcomes
//
// Each attempt is one base round trip:
//
//	attempt outcome                      fn returns                          caller gets (if it is the last)
//	transport error                      the error                           the error (retry.ErrExhausted after retries)
//	failure status (IsFailure)           *StatusError, with RetryAfter       that last response, nil error;
//	                                                                         ctx's error if ctx is done
//	success, no body (HEAD, 204...)      nil                                 the response
//	success with a body                  nil at EOF or early Close,          the response, at once; the body's
//	                                     the read error if it breaks,        Read returns the stream's error,
//	                                     ctx's error if ctx ends it, both    or the call's if ctx ended it
//	                                     marked with policy.Permanent
//	first byte later than                ErrFirstByteTimeout (a retry        ErrFirstByteTimeout
//	FirstByteTimeout                     may repeat it)
//	a Read waited IdleTimeout            ErrIdleTimeout, marked with         the Read returns ErrIdleTimeout
//	                                     policy.Permanent
//	the base returns nil, nil            an error naming the base,           that error
//	                                     marked with policy.Permanent
//	rejected before any attempt          -                                   the rejection (errors.Is policy.ErrRejected)
//	rejected after a failure status      -                                   that last response, nil error (the request was sent:
//	                                                                         no rejection; the policy's error was retry's
//	                                                                         *ExhaustedError with Reason "rejected")
//	rejected after a transport error     -                                   retry's *ExhaustedError, Reason "rejected": it
//	                                                                         matches the transport error, not ErrRejected
//
// A failure response's body is read into memory, up to [MaxFailureBody]
// bytes, while its attempt is live. Its Retry-After becomes the
// StatusError's RetryAfter, which package retry uses as the next wait.
// [DefaultIsFailure] says which attempts may be retried.
//
// A Transport sends one attempt at a time. To hedge, wrap it in a
// [Hedging]. Each hedged attempt is then a whole RoundTrip, with its own
// bulkhead slot: size the bulkhead for 1 + MaxHedges attempts per call. An
// adaptive limit learns each attempt's time to its response headers.
//
// # Client side: token usage
//
// Under a ratelimit.Limiter with a shared quota (ratelimit.Config.Shared),
// a Transport reads each response for the tokens an LLM provider says
// the attempt used. It reports them with ratelimit.ReportUsage before the
// attempt ends, so the quota is settled at what the provider counted, not
// at the declared cost. An attempt no shared quota settles
// (ratelimit.WantsUsage) has nothing read.
//
// The body is read as the caller reads it, never buffered for this: a
// body of any size costs a few KiB. An application/json body gives its
// top-level "usage" object. A text/event-stream body gives, in each
// event's data, the top-level "usage" or that of its "response" or
// "message" object. A body already in memory (a failure's, or a small one
// read whole under FirstByteTimeout) is read before the attempt ends. An
// encoded body, or one of another type, is not read. The counts are:
//
//   - OpenAI Chat Completions: total_tokens, or prompt_tokens +
//     completion_tokens. Streamed (stream_options.include_usage): the
//     last chunk's usage.
//   - OpenAI Responses: total_tokens, or input_tokens + output_tokens.
//     Streamed: the usage of response.completed's response.
//   - Anthropic Messages: input_tokens + output_tokens +
//     cache_creation_input_tokens; cache reads are not counted. Streamed:
//     message_start's counts, then, after each message_delta, its output
//     so far. A stream cut after a message_delta reports what it got.
//
// A usage is reported as soon as its object (or its event) ends, so a
// caller that stops reading after it still has it counted. A later one
// replaces it. A usage is not reported if it is over 4 KiB, lacks the
// counts above, or has a count that is not a JSON integer (a string, 1.5,
// 1.0, 1e3, NaN), is negative or is above 2147483647. An earlier report
// then stands; without one, the attempt is settled at its declared cost
// if it succeeded, at 0 if it failed.
//
// # Server side
//
// [Handler] and [Middleware] run each request through a policy. The 503
// and 504 they write have the plain status texts as bodies: rejection
// details stay in telemetry.
//
// # Priority
//
// A [Handler] gives each request the priority (policy.Priority) of
// HandlerConfig.Priority, or the [PriorityHeader]'s of a client that
// HandlerConfig.TrustPriority trusts. A Transport with PropagatePriority
// sends the priority of each request's context to the next hop. A
// request's key (policy.WithKey: the tenant it is made for) comes from
// HandlerConfig.Key, so that a keyed.Group gives each tenant its own
// policy; no key is read from a header unless Key reads it.
package httppolicy

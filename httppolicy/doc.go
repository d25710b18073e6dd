// Package httppolicy puts watertight policies on HTTP. [Transport] runs the
// requests a client sends to one dependency through a [policy.Policy],
// usually a *compose.Pipeline of bulkhead, deadline, retry and breaker.
// [Handler] runs the requests a server receives through one.
//
// # Client side: one Execute per exchange
//
// [Transport.RoundTrip] makes one call of Policy.Execute per request. The
// call lasts for the whole exchange, body included. The bulkhead slot
// stays taken and the deadline's context stays live until the caller has
// read the body to EOF or closed it. Only then does the breaker judge the
// call. A slow stream is load a bulkhead must count. A stream cut
// half-way is a failure a breaker must see.
//
// The caller gets the response as soon as the headers are in. The body's
// end then ends the call. EOF is a success, and so is an early Close: the
// caller chose to stop. A failed Read is a failure, with its error. The
// end of the attempt's context ends the call too, read or not, with the
// context's error. The final Read (EOF or error) and Close return only
// once the policies have judged the call: the slot is free and the
// breaker has counted.
//
// When Policy is a *compose.Pipeline (or a watertight.Pipeline) whose
// Holds reports true, the pipeline runs on the caller's goroutine: no
// goroutine is started per request. Any other policy runs on a goroutine
// of the Transport's.
//
// A panic in a policy, Signals or IsFailure before the response is handed
// over goes on up RoundTrip's caller. Every policy has freed what it held
// by then, and the response's body is closed. A runtime.Goexit there ends
// the caller's goroutine. A panic in a policy's work after the hand-over
// (a user hook) is reported to otel.Handle. With a pipeline that holds,
// that work runs on the goroutine that ends the body: its final Read or
// Close, or a goroutine of the context package's when the context ends.
// The Read or Close returns after the report. A runtime.Goexit in a user
// hook (a breaker's OnStateChange, say) cannot be stopped there: it ends
// that goroutine. Hooks must not call runtime.Goexit.
//
// Once the response has been handed over, nothing is retried: the
// stream's failure is marked with retry.Permanent. A 101 Switching
// Protocols response keeps its writable body (an io.ReadWriteCloser, as
// net/http gives it). The call lasts as long as the switched connection.
//
// So the Deadline bounds the whole exchange: the wait for headers and the
// reading of the body. The Attempt policy of a pipeline bounds each
// attempt, its stream included. For a stream of unknown length, use the
// stream timeouts below and leave the Attempt unset. Or set it for the
// longest stream you accept.
//
// # Client side: stream timeouts
//
// Two timeouts of the Transport watch a stream rather than a call. Each
// is off when zero, and a request may set its own with
// [WithStreamTimeouts]:
//
//   - [Transport.FirstByteTimeout] bounds each attempt's wait from sending
//     the request to the first byte of the response body (to the headers,
//     for a response without a body). RoundTrip hands the response over
//     only once that byte is in. So a late first byte is the attempt's
//     failure: a breaker counts it, and it is retried when the request may
//     be (see below). The caller never sees the start of a stream that is
//     then abandoned. A body that comes whole, with its end, while
//     RoundTrip waits for its first byte ends the call at once: the
//     bulkhead slot is free before the caller reads.
//   - [Transport.IdleTimeout] bounds the waits for the body handed over.
//     Its timer starts when the response is handed over. It runs only
//     while a Read waits for data, so a slow reader is not taken for a
//     stalled stream. A Read that brings data that counts restarts it; for
//     most bodies, that is any byte. When it fires, that Read fails, and
//     the call ends as a failure: a breaker counts it. Nothing is retried,
//     since the caller has part of the answer.
//
// For a text/event-stream response, both count only events. Keepalives do
// not count: comment lines (": ping", the keepalive of many servers),
// events without data, and events whose type is in
// [Transport.KeepaliveEvents] (Anthropic's "ping" by default), all their
// lines included. An event counts once it is complete (its blank line is
// in), or once it has more than 4 KiB of data (the values of its data
// lines), whatever its type.
//
// So the idle timer of an event stream restarts at a Read that completes
// an event that counts, or that brings more data of an event past 4 KiB
// (or its end). The waits of the Reads in between add up, whether they
// bring keepalives or pieces of the next event: a small event must be
// complete before they reach the idle timeout.
//
// For any other content type, every byte counts. So it does for an event
// stream still encoded (a Content-Encoding other than identity, as
// net/http leaves the body when the caller sets Accept-Encoding itself):
// its keepalives cannot be told from its events then.
//
// What RoundTrip reads while it waits for the first byte is kept and read
// first by the caller, keepalives included. A stream that sends more than
// 1 MiB of keepalives before its first event fails the attempt. A
// keepalive event counts toward that limit once it is complete. The lines
// of the event being read do not count toward it, however the reads split
// them; the attempt fails too if that event passes 1 MiB before it counts.
// Neither timeout watches the connection of a 101 Switching Protocols
// response.
//
// The errors match [ErrFirstByteTimeout] or [ErrIdleTimeout]. They also
// match deadline.ErrExceeded and context.DeadlineExceeded, never
// context.Canceled, so a breaker counts them. They are counted in
// watertight.timeouts, with watertight.policy.kind first_byte or idle and
// the Transport's Name. They are added to the span in the request's
// context as watertight.timeout events.
//
// The timeouts fit together so:
//
//   - FirstByteTimeout catches a provider that sends headers and then
//     nothing. It is retried while nothing has reached the caller.
//   - IdleTimeout catches a stream that stalls mid-way, however many
//     keepalives keep it looking alive. It watches only the body of a
//     response handed over. The attempt's context bounds the reading of a
//     failure response's body, which the Transport reads itself.
//   - The pipeline's Deadline bounds the whole call, retries and stream
//     included.
//   - The Attempt, if set, bounds each attempt, its stream included: leave
//     it unset or long when streaming.
//
// A completion that is not streamed gets its headers only once the whole
// answer is written. Send it with WithStreamTimeouts and a first byte
// timeout that fits, or zero.
//
// A timeout gives an error of the same identity whether it ends the wait
// for headers or the stream. When the context ends the stream, the Read
// that fails returns the error the call ended with, not net/http's read
// error. So a Deadline or Attempt timeout gives an error matching
// deadline.ErrExceeded and context.DeadlineExceeded (a
// *deadline.ExceededError naming the policy that fired). The caller's own
// cancellation gives context.Canceled. Before the headers, the pipeline's
// retry may retry a timeout; its final error is then a
// *retry.ExhaustedError around it. Once the body streams, nothing is
// retried. The caller's error carries no retry.Permanent marker that a
// retry would still honour (see retry.Unmark). So a retry of the
// caller's own around the request sees it as any other error.
//
// A base RoundTripper that returns neither a response nor an error is
// broken. The attempt fails with an error naming its type, as http.Client
// reports it. A breaker counts it, and no retry repeats it.
//
// A caller that never closes the body, and never reads it to the end,
// holds the bulkhead slot until the request's context (or the Deadline)
// is done, as net/http keeps the connection. Without a Deadline and a
// context that ends, it holds it forever: always close the body.
//
// # Client side: outcomes
//
// Each attempt is one base round trip. What fn reports to the policies, and
// what the caller finally gets:
//
//	attempt outcome                      fn returns                          caller gets (if it is the last)
//	transport error                      the error                           the error (retry.ErrExhausted after retries)
//	failure status (IsFailure)           *StatusError, with RetryAfter       that last response, nil error;
//	                                                                         ctx's error if ctx is done
//	success, no body (HEAD, 204...)      nil                                 the response
//	success with a body                  nil at EOF or early Close,          the response, at once; the body's
//	                                     the read error if it breaks,        Read returns the stream's error,
//	                                     ctx's error if ctx ends it, both    or the call's if ctx ended it
//	                                     marked with retry.Permanent
//	first byte later than                ErrFirstByteTimeout (a retry        ErrFirstByteTimeout
//	FirstByteTimeout                     may repeat it)
//	a Read waited IdleTimeout            ErrIdleTimeout, marked with         the Read returns ErrIdleTimeout
//	                                     retry.Permanent
//	the base returns nil, nil            an error naming the base,           that error
//	                                     marked with retry.Permanent
//	rejected before any attempt          -                                   the rejection (errors.Is policy.ErrRejected)
//	rejected after a failure status      -                                   that last response, nil error (the request was sent:
//	                                                                         no rejection; the policy's error was retry's
//	                                                                         *ExhaustedError with Reason "rejected")
//	rejected after a transport error     -                                   retry's *ExhaustedError, Reason "rejected": it
//	                                                                         matches the transport error, not ErrRejected
//
// A failure response's body is read into memory while its attempt is
// still live, and the original is closed: the connection is reused, and
// the response stays readable if the retries end on it. At most
// [MaxFailureBody] bytes are kept; a longer body ends with
// [ErrBodyTruncated]. The caller gets the last response when errors.As
// finds its *StatusError in the error the policy returned: exhausted
// retries, a Retry-After too long, a permanent status, the Deadline
// passing during the wait. If the request's own context is done, the
// caller gets the context's error (ctx.Err()) instead, never a
// *StatusError.
//
// Retry-After on a failure response (delta-seconds or an HTTP-date) and
// Retry-After-Ms (see [ParseRetryAfter]) become the StatusError's
// RetryAfter. Package retry uses it as the next wait. By retry's rules, a
// wait longer than its MaxInterval, or past the deadline, ends the
// retries at once, and the caller gets that response.
//
// # Client side: what may be retried
//
// A request is idempotent if its method is GET, HEAD, OPTIONS, TRACE, PUT
// or DELETE, or if it has an Idempotency-Key or X-Idempotency-Key header.
// An idempotent request may be retried after any failure. Others (POST,
// PATCH...) may be retried only when the server plainly did not process
// them: connection refused, 429 or 503. After any other failure, the
// attempt's error is marked with retry.Permanent: a retry policy stops,
// and a breaker still counts it. If a policy ignores the marker, the
// Transport refuses to send the request again. [Transport.RetryUnsafe]
// lifts the rule. A request body is sent again with GetBody; a request
// with a body and no GetBody is never retried. Whether a failure is
// retried at all is for the retry policy to decide (its MaxAttempts,
// ShouldRetry, budget). The Transport only marks the failures that must
// not be.
//
// # Client side: hedging
//
// The Transport sends one attempt at a time. If a policy runs fn while
// another attempt runs, that attempt fails at once, marked with
// retry.Permanent. So does one started after Execute returned. A
// *retry.Hedge as the Policy is refused outright. To hedge, wrap the
// Transport in a [Hedging]. Each hedged attempt is then a whole RoundTrip
// of the Transport, with its own bulkhead slot, breaker verdict, retries
// and stream timeouts. A hedge the bulkhead refuses stops the hedging:
// size the bulkhead for 1 + MaxHedges attempts per call.
//
// Hedging hedges only requests safe to send twice at once: an idempotent
// method (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) and a body, if any, that
// GetBody can replay. A POST is never sent twice, Idempotency-Key or not:
// any other request goes to the Transport once. The first response that
// is not a failure (by Hedging.IsFailure) wins; with a first byte
// timeout, its first byte must be in. The caller gets it and no other.
// The others are canceled with the cause retry.ErrHedgeLost, which a
// breaker excludes. The body of a response that arrives later is closed
// at once. If every attempt fails with a failure response, the caller
// gets the last (the one the hedge's error names), as from a Transport.
//
// A losing attempt whose base ignores its context keeps its bulkhead slot
// and its connection until the base returns. The winner does not wait for
// it. A panic in an attempt before the call has its outcome reaches the
// caller. A panic in an attempt that lost (a Signals on a late response, a
// base on its cancel path) is reported to otel.Handle, with its value and
// stack, and the program goes on. retry.Hedged on its own differs: there
// a losing attempt's late panic crashes the program. Set an otel error
// handler that your alerts see.
//
// An adaptive limit in the pipeline learns from each attempt's time to
// its response headers. A stream answered in 10 ms and read for 500 ms is
// a 10 ms sample.
//
// # Connections and HTTP/2
//
// Give each dependency its own base transport sized to its bulkhead with
// [NewDependencyTransport]: MaxConnsPerHost equal to the bulkhead's limit
// means no admitted call waits unseen for a connection. A bulkhead counts
// requests in flight, hedged attempts included (each takes a slot), so
// the pool needs no more connections than the limit. Over HTTP/2 many
// streams share one connection, so MaxConnsPerHost bounds little there: the
// bulkhead is the bound.
//
// # Server side
//
// [Handler] (and [Middleware]) run each request through a policy. The
// request's context is replaced by the one Execute gives, so a Deadline
// bounds the handler. A rejection is answered 503 with a Retry-After
// header, or by HandlerConfig.OnReject. The Deadline is answered 504 when
// the handler wrote nothing. A 5xx the handler wrote is reported to the
// policy as a failure (a breaker counts it), with no further write. The handler never runs
// twice: its failures are marked with retry.Permanent. The ResponseWriter
// it gets keeps http.Flusher, http.Hijacker and http.ResponseController
// working. A panic in the handler frees the policy's hold and goes on to
// net/http, which recovers it.
//
// The handler sets its headers in a map of its own. They are copied into
// the response's as it answers (first WriteHeader, Write, Flush...). A 503
// or 504 written in its place goes out with the headers as they were when
// Handler was called. It keeps an outer middleware's Content-Encoding and
// leaves out the handler's Set-Cookie or Cache-Control. Trailers work as
// net/http documents them.
//
// The 503 and 504 bodies are the plain status texts: rejection details
// (policy names, reasons) stay on the server, in telemetry.
package httppolicy

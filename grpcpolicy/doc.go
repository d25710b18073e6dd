// Package grpcpolicy puts watertight policies on gRPC: a [Client] holds
// the interceptors that run a grpc-go client's calls to one dependency
// through a [policy.Policy] (usually a *compose.Pipeline or
// *watertight.Pipeline of bulkhead, deadline, retry and breaker), and a
// [Server] holds the interceptors that run a server's calls through one
// and shed the load it rejects.
//
// It is a module of its own (github.com/watertight/watertight/grpcpolicy),
// so that the core module does not depend on google.golang.org/grpc.
//
// # Client side: unary calls
//
// [Client.UnaryInterceptor] makes one Policy.Execute per call, and one
// invoker call per attempt, on the caller's goroutine. Each failed
// attempt's status is classified ([ClientConfig.Classify], by default
// [DefaultClassify]):
//
//	verdict       the policy sees                    retried   counted by a breaker   the caller gets
//	CallerError   success                            no        as a success           grpc-go's status, unchanged
//	Failure       *StatusError, retry.Permanent      no        as a failure           the policy's error (status kept)
//	Retryable     *StatusError                       yes       as a failure           the policy's error (status kept)
//
// The defaults: UNAVAILABLE is retried; RESOURCE_EXHAUSTED is retried when
// the server pushes back with a delay, and is the caller's own otherwise
// (grpc-go's own "message larger than max" is a RESOURCE_EXHAUSTED);
// DEADLINE_EXCEEDED (our attempt deadline, or the server's), INTERNAL,
// UNKNOWN and DATA_LOSS are failures not retried;
// every other code (INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED...) is
// the caller's own. The end of the caller's own context ends the call,
// whatever the classification, and a breaker does not count it. Our
// timeouts are counted: an attempt deadline and a stream timeout end the
// attempt's own context, not the one the breaker was given, and a
// Deadline's timer ending the breaker's context is told from the caller's
// end by deadline.Fired.
//
// Every error the caller gets has a gRPC status, so status.Code works: the
// status of the last attempt when there was one (a retry's ExhaustedError
// unwraps to the attempt's *StatusError), UNAVAILABLE for a rejection
// (errors.Is policy.ErrRejected: a full bulkhead, an open breaker; the
// call never left the client), DEADLINE_EXCEEDED for a timeout (errors.Is
// deadline.ErrExceeded and context.DeadlineExceeded), CANCELLED for the
// caller's cancellation.
//
// # Pushback (gRFC A6)
//
// A server may ask for a wait before the next attempt in the
// grpc-retry-pushback-ms trailer ([PushbackKey], [ParsePushback]). A
// delay becomes the *StatusError's RetryAfter, which package retry uses
// as the next wait, exactly, in place of its schedule; by retry's rules a
// pushback longer than its MaxInterval, or past the deadline, ends the
// retries at once. A negative, malformed or repeated value asks the client
// not to retry: the attempt is then never retried, whatever Classify says.
//
// # Client side: streams
//
// [Client.StreamInterceptor] makes one Policy.Execute per stream, which
// lasts until the stream ends, as httppolicy's Transport keeps it for a
// response body: the bulkhead slot stays taken, the deadline's context
// stays live and the breaker's verdict waits until RecvMsg returns io.EOF
// (a success) or an error (classified as above), or the caller's context
// or a timeout of the policy ends the stream. When RecvMsg returns the
// end, Execute has returned: the slot is free and the breaker has counted.
// Execute runs on a goroutine of its own, since the stream must reach the
// caller before the call ends.
//
// A Retryable failure of a stream is retried while nothing has reached the
// caller: no message, no header (Header), no error from SendMsg. The new
// attempt opens a new stream, sends again what the caller sent (at most
// [MaxReplay] messages, kept by reference: as grpc-go requires, do not
// modify a message after SendMsg), closes its sending side if the caller
// had, and RecvMsg goes on reading it: the caller sees one stream. Once a
// message or the header has reached the caller, nothing is retried.
//
// [ClientConfig.FirstMessageTimeout] bounds the wait for a stream's first
// message, from its opening, and [ClientConfig.IdleTimeout] each wait of
// RecvMsg for the next one, as httppolicy's stream deadlines do for a
// body. When one fires, the stream's context is canceled with a
// *StreamTimeoutError as its cause (context.Cause), and the stream ends
// with that error: it matches deadline.ErrExceeded and
// context.DeadlineExceeded, and has status DEADLINE_EXCEEDED. Both are
// failures for a breaker. A first-message timeout is retried, as
// httppolicy's first byte timeout is, while nothing has reached the
// caller; an idle timeout, which comes after a message, never is. Each
// adds 1 to watertight.timeouts (watertight.policy.kind "first_message" or
// "idle", watertight.policy.name [ClientConfig.Name]) and a
// watertight.timeout event to the call's span.
//
// As with grpc-go, a caller must end every stream (read until RecvMsg
// fails, or cancel its context): an abandoned stream holds its slot until
// its context ends.
//
// # Hedging
//
// A policy that runs attempts of one call concurrently (retry.Hedge) is
// not supported: two attempts of a unary call would unmarshal into the
// same reply, and a stream cannot be two streams. An attempt started
// while another of the same call runs fails at once, marked with
// retry.Permanent, with an error saying so, and the interceptor returns
// only once the attempt that was running has: nothing writes the caller's
// reply after the call returned. To hedge, run retry.Hedged above the
// generated client, with a reply of each attempt's own: each attempt is a
// whole call through the interceptor and its policy.
//
// # grpc-go's own retries
//
// grpc-go retries by itself only when a service config sets a retryPolicy
// (it is off by default), and then each attempt of the policy is up to
// maxAttempts of grpc-go's: the attempts multiply, and a breaker sees only
// the last of grpc-go's. [Client.DialOptions] installs the interceptors
// with grpc.WithDisableRetry, which turns grpc-go's retries off, whatever
// a service config says; use it, or add grpc.WithDisableRetry yourself.
// grpc-go's transparent retries, of calls that never reached the server,
// cannot be turned off and need not be: they happen inside one attempt of
// the policy, and cost the server nothing.
//
// # Server side
//
// [Server.UnaryInterceptor] and [Server.StreamInterceptor] run each call's
// handler through its method's policy, with the call's context replaced
// by the one Execute gives, so a Deadline bounds the handler. A rejection
// is answered at once, before the handler runs (it costs the server no
// handler, no database call: only the decoding of a unary request, which
// grpc-go does before any interceptor), with [ServerConfig.RejectCode] and
// a grpc-retry-pushback-ms trailer of [ServerConfig.Pushback]. A handler's
// failure status ([DefaultServerIsFailure]: UNKNOWN, INTERNAL,
// UNAVAILABLE, DATA_LOSS, DEADLINE_EXCEEDED) is a failure for the policy
// (a breaker counts it); the handler never runs twice. A panic or
// runtime.Goexit in the handler is caught in the policy's attempt, which
// returns a permanent failure (the policy frees its hold, a breaker
// counts it), and is raised again on the interceptor's goroutine once
// Execute has returned, toward grpc-go, a Goexit as a Goexit. This holds
// with a hedging policy too, whose attempt runs the handler on a goroutine
// of its own and may outlive Execute (the client canceled): the
// interceptor waits for the handler, then raises its panic where a
// recovery interceptor installed before this one recovers it (grpc-go
// does not recover a panic: install one if you want one). An attempt a
// hedge starts after the interceptor has returned runs no handler. A
// client's unary call raises a panic on the caller's goroutine too; for a
// client stream, see [Client.StreamInterceptor]. The telemetry is the
// policy's, as with httppolicy's Handler: a rejection is counted by the
// bulkhead or breaker that refused.
//
// The server's unary interceptor allocates once per call of its own (the
// call's state, which is also the context Execute gets), where the
// client's allocates nothing (its calls are recycled through a
// sync.Pool). The server's are not recycled on purpose: a hedging policy
// may start an attempt on its own goroutine after Execute has returned,
// and that late attempt must find its own call, never a later call's
// recycled state, whatever contexts the policies derive. A late attempt
// runs no handler: the call is closed once the interceptor returns.
//
// Rejections are answered UNAVAILABLE by default: it is the code a gRPC
// client is expected to retry with backoff (grpc-go's retryPolicy
// examples, this package's [DefaultClassify]), possibly on another
// backend, and a client breaker counts it, which is what an overloaded
// server wants. RESOURCE_EXHAUSTED says the same to a client that reads
// the pushback, but generic clients do not retry it, since grpc-go also
// uses it for a message too large or a quota spent: choose it to make
// clients give up rather than retry. Either way the pushback tells a
// well-behaved client when to come back; a negative Pushback sends -1,
// which asks it not to retry at all.
package grpcpolicy

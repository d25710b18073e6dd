// Package grpcpolicy puts watertight policies on gRPC. A [Client] holds the
// interceptors that run a grpc-go client's calls to one dependency through
// a [policy.Policy], usually a pipeline of bulkhead, deadline, retry and
// breaker. A [Server] holds the interceptors that run a server's calls
// through one and shed the load it rejects.
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
//	Failure       *StatusError, policy.Permanent      no        as a failure           the policy's error (status kept)
//	Retryable     *StatusError                       yes       as a failure           the policy's error (status kept)
//
// By default:
//
//   - UNAVAILABLE is retried.
//   - RESOURCE_EXHAUSTED is retried when the server pushes back with a
//     delay, and is the caller's own otherwise (grpc-go's "message larger
//     than max" is a RESOURCE_EXHAUSTED).
//   - DEADLINE_EXCEEDED (an attempt deadline's or the server's), INTERNAL,
//     UNKNOWN and DATA_LOSS are failures, not retried.
//   - Every other code (INVALID_ARGUMENT, NOT_FOUND...) is the caller's own.
//
// The end of the caller's own context ends the call, whatever the
// classification, and a breaker does not count it. The policy's own
// timeouts are counted. An attempt deadline and a stream timeout end the
// attempt's own context, not the breaker's. A Deadline's timer ending the
// breaker's context is told from the caller's end by policy.TimedOut.
//
// Every error the caller gets has a gRPC status, so status.Code works:
//
//   - the status of the last attempt, if one ran (a retry's ExhaustedError
//     unwraps to the attempt's *StatusError);
//   - UNAVAILABLE for a rejection (errors.Is policy.ErrRejected): the call
//     never left the client;
//   - DEADLINE_EXCEEDED for a timeout (errors.Is deadline.ErrExceeded and
//     context.DeadlineExceeded);
//   - CANCELLED for the caller's cancellation.
//
// # Pushback (gRFC A6)
//
// A server may ask for a wait before the next attempt in the
// grpc-retry-pushback-ms trailer ([PushbackKey], [ParsePushback]). A delay
// becomes the *StatusError's RetryAfter, which package retry uses as the
// next wait, in place of its schedule. By retry's rules, a pushback longer
// than its MaxInterval, or past the deadline, ends the retries at once. A
// negative, malformed or repeated value asks the client not to retry: the
// attempt is never retried, whatever Classify says.
//
// # Client side: streams
//
// [Client.StreamInterceptor] makes one Policy.Execute per stream, which
// lasts until the stream ends. Until then the bulkhead slot stays taken,
// the deadline's context stays live, and the breaker's verdict waits. The
// stream ends when RecvMsg returns io.EOF (a success) or an error
// (classified as above), or when the caller's context or a policy timeout
// ends it. When RecvMsg returns the end, Execute has returned: the slot is
// free and the breaker has counted. Execute runs on its own goroutine.
//
// A Retryable failure of a stream is retried while nothing has reached the
// caller: no message, no header, no error from SendMsg. The new attempt
// opens a new stream and sends again what the caller sent, at most
// [MaxReplay] messages. It keeps them by reference: as grpc-go requires,
// do not modify a message after SendMsg. It closes its sending side if the
// caller had, and RecvMsg goes on reading it: the caller sees one stream.
//
// [ClientConfig.FirstMessageTimeout] bounds the wait for a stream's first
// message, from its opening. [ClientConfig.IdleTimeout] bounds each wait
// of RecvMsg for the next one. When one fires, the stream's context is
// canceled with a *StreamTimeoutError as its cause, and the stream ends
// with that error. It matches deadline.ErrExceeded and
// context.DeadlineExceeded, and has status DEADLINE_EXCEEDED. Both are
// failures for a breaker. A first-message timeout is retried while nothing
// has reached the caller; an idle timeout never is. Each adds 1 to
// watertight.timeouts (watertight.policy.kind "first_message" or "idle",
// watertight.policy.name [ClientConfig.Name]) and a watertight.timeout
// event to the call's span.
//
// As with grpc-go, a caller must end every stream, by reading until
// RecvMsg fails or by canceling its context. An abandoned stream holds its
// slot until its context ends.
//
// # Hedging
//
// A policy that runs attempts of one call concurrently is not supported. An attempt started while another of the same call runs
// fails at once, marked with policy.Permanent. The interceptor returns only
// once the running attempt has, so nothing writes the caller's reply after
// the call returned. To hedge, run hedge.Do above the generated
// client, with a reply of each attempt's own.
//
// # grpc-go's own retries
//
// When a service config sets a retryPolicy, grpc-go retries by itself, and
// each attempt of the policy becomes up to maxAttempts of grpc-go's.
// [Client.DialOptions] installs the interceptors with
// grpc.WithDisableRetry, which turns grpc-go's retries off whatever a
// service config says. Use it, or add grpc.WithDisableRetry yourself.
// grpc-go's transparent retries, of calls that never reached the server,
// happen inside one attempt and need not be turned off.
//
// # Server side
//
// [Server.UnaryInterceptor] and [Server.StreamInterceptor] run each call's
// handler through its method's policy, with the context Execute gives, so
// a Deadline bounds the handler. A rejection is answered at once, before
// the handler runs, with [ServerConfig.RejectCode] and a
// grpc-retry-pushback-ms trailer of [ServerConfig.Pushback]. A handler's
// failure status ([DefaultServerIsFailure]) is a failure for the policy.
// The handler never runs twice.
//
// A panic or runtime.Goexit in the handler is caught in the policy's
// attempt, which returns a permanent failure: the policy frees its hold,
// and a breaker counts it. It is raised again on the interceptor's
// goroutine once Execute has returned, a Goexit as a Goexit. With a
// hedging policy, whose attempt may outlive Execute, the interceptor waits
// for the handler first. grpc-go does not recover panics: install a
// recovery interceptor before this one if you want one. An attempt a hedge
// starts after the interceptor has returned runs no handler. A client's
// unary call raises a panic on the caller's goroutine too; for a client
// stream, see [Client.StreamInterceptor].
//
// The telemetry is the policy's: a rejection is counted by the bulkhead or
// breaker that refused. The server's unary interceptor allocates once per
// call; the client's allocates nothing.
//
// Rejections are answered UNAVAILABLE by default: the code a gRPC client
// retries with backoff, possibly on another backend, and that a client
// breaker counts. Generic clients do not retry RESOURCE_EXHAUSTED: choose
// it to make clients give up rather than retry. Either way the pushback
// tells a well-behaved client when to come back. A negative Pushback sends
// -1, which asks it not to retry at all.
//
// # Priority
//
// A server call's priority (policy.Priority) comes from
// ServerConfig.Priority, a function of the call's context and method. The
// priority a client sends in the [PriorityKey] metadata is used only when
// ServerConfig.TrustPriority says the client is trusted, and only if it is
// a known one: an untrusted client cannot raise its own priority. The
// policies and the handler see the priority in the context. A client with
// ClientConfig.PropagatePriority sends the priority of each call's context
// to the next hop.
//
// A server call's key (policy.WithKey: the tenant it is made for) comes
// from ServerConfig.Key, a function of the call's context and method, so
// that a keyed.Group gives each tenant its own policy. No key is read from
// metadata unless Key reads it.
package grpcpolicy

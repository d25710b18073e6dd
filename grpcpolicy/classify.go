package grpcpolicy

import (
	"context"
	"errors"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/policy"
)

// PushbackKey is the trailer in which a server tells a client how long to
// wait before retrying, in milliseconds (gRFC A6).
const PushbackKey = "grpc-retry-pushback-ms"

// Pushback is what a server said in the [PushbackKey] trailer of a failed
// call. The zero value means the server said nothing.
type Pushback struct {
	// Set reports whether the trailer was present.
	Set bool
	// Stop reports that the server asked the client not to retry: the
	// trailer was negative, not a decimal integer, or present more than
	// once (gRFC A6 and grpc-go read all three so).
	Stop bool
	// Delay is the wait the server asked for, when Set and not Stop.
	Delay time.Duration
}

// ParsePushback reads the [PushbackKey] trailer from md (nil is fine). A
// single value of decimal digits is a delay in milliseconds (too large a
// value saturates); anything else present asks the client not to retry. It
// never panics and is safe for concurrent use.
func ParsePushback(md metadata.MD) Pushback {
	vs := md[PushbackKey]
	switch len(vs) {
	case 0:
		return Pushback{}
	case 1:
	default:
		return Pushback{Set: true, Stop: true}
	}
	v := vs[0]
	if v == "" {
		return Pushback{Set: true, Stop: true}
	}
	const maxMs = int64(1<<63-1) / int64(time.Millisecond)
	var ms int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return Pushback{Set: true, Stop: true}
		}
		if ms <= maxMs {
			ms = ms*10 + int64(c-'0')
		}
	}
	if ms > maxMs {
		return Pushback{Set: true, Delay: time.Duration(1<<63 - 1)}
	}
	return Pushback{Set: true, Delay: time.Duration(ms) * time.Millisecond}
}

// Verdict is how a failed call's status is treated by the policy.
type Verdict uint8

const (
	// CallerError: the dependency answered, and the status is the
	// caller's own concern (INVALID_ARGUMENT, NOT_FOUND...). The policy
	// sees a success: no retry, and a breaker counts it as a success. The
	// caller gets the status as grpc-go returned it.
	CallerError Verdict = iota
	// Failure: a failure of the dependency, counted by a breaker, not
	// retried (it is marked with policy.Permanent).
	Failure
	// Retryable: a failure of the dependency, counted by a breaker, that a
	// retry policy may retry (subject to its own rules), before any
	// message of a stream has reached the caller.
	Retryable
)

// String returns "caller_error", "failure" or "retryable".
func (v Verdict) String() string {
	switch v {
	case CallerError:
		return "caller_error"
	case Failure:
		return "failure"
	case Retryable:
		return "retryable"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// DefaultClassify is the classification a [Client] uses when
// ClientConfig.Classify is nil:
//
//	code                                      verdict
//	UNAVAILABLE                               Retryable (Failure if the pushback says stop)
//	RESOURCE_EXHAUSTED with a pushback delay  Retryable
//	RESOURCE_EXHAUSTED without one            CallerError (grpc-go's own "message larger than max", a quota)
//	DEADLINE_EXCEEDED                         Failure (our attempt deadline, the server's)
//	INTERNAL, UNKNOWN, DATA_LOSS              Failure
//	anything else                             CallerError (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
//	                                            PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION,
//	                                            ABORTED, OUT_OF_RANGE, UNIMPLEMENTED, CANCELLED)
//
// The end of the caller's own context is neither: it ends the call
// whatever the classification. It is safe for concurrent use.
func DefaultClassify(code codes.Code, pb Pushback) Verdict {
	switch code {
	case codes.Unavailable:
		if pb.Stop {
			return Failure
		}
		return Retryable
	case codes.ResourceExhausted:
		if pb.Set && !pb.Stop {
			return Retryable
		}
		return CallerError
	case codes.DeadlineExceeded, codes.Internal, codes.Unknown, codes.DataLoss:
		return Failure
	}
	return CallerError
}

// StatusError is the error an attempt fails with when the call ended with
// a status classified as a failure; the retry and breaker policies see it.
// status.Code and status.FromError work on it and on any error wrapping
// it. Its RetryAfter carries the server's pushback to package retry.
//
// A StatusError is not modified after it is created; it may be read from
// several goroutines.
type StatusError struct {
	// Err is the error grpc-go returned.
	Err error
	// Code is its status code.
	Code codes.Code
	// Pushback is what the server said in its grpc-retry-pushback-ms
	// trailer.
	Pushback Pushback
}

// Error returns Err's message.
func (e *StatusError) Error() string {
	if e.Err == nil {
		return "grpcpolicy: status " + e.Code.String()
	}
	return e.Err.Error()
}

// Unwrap returns Err.
func (e *StatusError) Unwrap() error { return e.Err }

// GRPCStatus returns the status of the call, for status.FromError.
func (e *StatusError) GRPCStatus() *status.Status {
	if s, ok := status.FromError(e.Err); ok && s != nil && e.Err != nil {
		return s
	}
	return status.New(e.Code, e.Error())
}

// RetryAfter returns the server's pushback delay, or 0 if it set none. A
// retry policy waits that long before the next attempt. A pushback of
// 0 ms, which asks for a retry at once, is returned as 1ns, since package
// retry reads 0 as "no wait asked for".
func (e *StatusError) RetryAfter() time.Duration {
	if e.Pushback.Set && !e.Pushback.Stop {
		return max(e.Pushback.Delay, time.Nanosecond)
	}
	return 0
}

// ErrorType returns the status code's name ("UNAVAILABLE"), recorded as
// error.type in telemetry.
func (e *StatusError) ErrorType() string { return codeName(e.Code) }

func codeName(c codes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "CODE_" + strconv.Itoa(int(c))
}

var codeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
	"INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

// grpcStatus is the shape of an error that carries a gRPC status.
type grpcStatus interface {
	error
	GRPCStatus() *status.Status
}

// callError is an error of the policy's own (a rejection, a deadline, the
// caller's cancellation) given a gRPC status code for the caller, so that
// status.Code works on it. It unwraps to the policy's error, so errors.Is
// finds policy.ErrRejected or policy.ErrTimeout.
type callError struct {
	err  error
	code codes.Code
}

func (e *callError) Error() string { return e.err.Error() }
func (e *callError) Unwrap() error { return e.err }
func (e *callError) GRPCStatus() *status.Status {
	return status.New(e.code, e.err.Error())
}

// callerError turns the error a policy's Execute returned into the error
// the caller of the RPC gets: one with a gRPC status. An error that already
// has one (a StatusError, or a retry's ExhaustedError around one) keeps it;
// a rejection gets UNAVAILABLE, a timeout DEADLINE_EXCEEDED, the caller's
// cancellation CANCELLED, anything else UNKNOWN. err must have been through
// policy.Unmark.
func callerError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[grpcStatus](err); ok {
		return err
	}
	code := codes.Unknown
	switch {
	case errors.Is(err, policy.ErrRejected):
		code = codes.Unavailable
	case errors.Is(err, policy.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return &callError{err: err, code: code}
}

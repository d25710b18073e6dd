package grpcpolicy

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
)

// Kinds of [StreamTimeoutError], in its Kind field.
const (
	// KindFirstMessage is ClientConfig.FirstMessageTimeout firing: no
	// message arrived in time after the stream opened.
	KindFirstMessage = "first_message"
	// KindIdle is ClientConfig.IdleTimeout firing: a RecvMsg after the
	// first message waited too long for the next one.
	KindIdle = "idle"
)

// StreamTimeoutError is the error a client stream ends with when its
// first-message or idle timeout fires. It matches [policy.ErrTimeout],
// [deadline.ErrExceeded] and [context.DeadlineExceeded] with errors.Is, and its status code is
// DEADLINE_EXCEEDED. It is the cause (context.Cause) of the stream's
// context. The zero value is a valid timeout with no kind.
//
// A Client returns the same pointer for every timeout of a kind: it must
// not be modified. Each timeout adds 1 to the watertight.timeouts counter,
// with watertight.policy.kind "first_message" or "idle" and
// watertight.policy.name the Client's Name. It adds a watertight.timeout
// event to the span in the stream's context if it is recording.
type StreamTimeoutError struct {
	// Kind is KindFirstMessage or KindIdle.
	Kind string
	// Timeout is the timeout that fired.
	Duration time.Duration

	msg string
	rec *timeoutRecord // nil in a StreamTimeoutError not made by a Client
}

func newStreamTimeout(kind string, d time.Duration, name string, counter metric.Int64Counter) *StreamTimeoutError {
	e := &StreamTimeoutError{Kind: kind, Duration: d}
	e.msg = e.message()
	e.rec = newTimeoutRecord(counter, kind, name)
	return e
}

// fire records the timeout and cancels the stream's context with it as the
// cause; ctx is the stream's context, for the span.
//
// The record comes first: the cancellation ends the caller's RecvMsg with
// the timeout, and a caller that has the error must find the counter and
// the span event already there (it may end the span at once, and an event
// added to an ended span is dropped). A stream that ends between the check
// below and cancel, as the timer fires, is counted as timed out though its
// own end won. An exact count would need a state that orders the timer
// against the stream's end, as httppolicy keeps.
func (e *StreamTimeoutError) fire(ctx context.Context, cancel context.CancelCauseFunc) {
	if ctx.Err() != nil {
		return // the stream had ended: no timeout
	}
	if e.rec != nil {
		e.rec.record(ctx)
	}
	cancel(e)
}

// Error returns a message such as
// "grpcpolicy: stream idle timeout of 2s exceeded".
func (e *StreamTimeoutError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return e.message()
}

func (e *StreamTimeoutError) message() string {
	kind := e.Kind
	switch kind {
	case KindFirstMessage:
		kind = "first-message"
	case "":
		kind = "stream"
	}
	return "grpcpolicy: stream " + kind + " timeout of " + e.Duration.String() + " exceeded"
}

// Is reports whether target is [policy.ErrTimeout], [deadline.ErrExceeded]
// or [context.DeadlineExceeded].
func (e *StreamTimeoutError) Is(target error) bool {
	return target == policy.ErrTimeout || target == deadline.ErrExceeded || target == context.DeadlineExceeded
}

// Timeout reports true, as net.Error does for a timeout.
func (e *StreamTimeoutError) Timeout() bool { return true }

// GRPCStatus returns a DEADLINE_EXCEEDED status with the error's message.
func (e *StreamTimeoutError) GRPCStatus() *status.Status {
	return status.New(codes.DeadlineExceeded, e.Error())
}

// ErrorType returns "timeout", recorded as error.type in telemetry, as the
// deadline policy's timeouts are.
func (e *StreamTimeoutError) ErrorType() string { return "timeout" }

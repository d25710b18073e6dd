package httppolicy

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/internal/telemetry"
)

// ErrFirstByteTimeout is matched, with [errors.Is], by the error of an
// attempt whose response did not bring its first byte within
// [Transport.FirstByteTimeout]. It also matches [deadline.ErrExceeded] and
// [context.DeadlineExceeded], so code that checks for a timeout in the
// usual way sees one, and a breaker counts it as a failure.
var ErrFirstByteTimeout error = &streamTimeoutSentinel{msg: "httppolicy: first byte timeout exceeded"}

// ErrIdleTimeout is matched, with [errors.Is], by the error a response
// body's Read returns (and the call ends with) when the stream sent no
// data for [Transport.IdleTimeout] while the Read waited. It also matches
// [deadline.ErrExceeded] and [context.DeadlineExceeded].
var ErrIdleTimeout error = &streamTimeoutSentinel{msg: "httppolicy: stream idle timeout exceeded"}

// streamTimeoutSentinel is the type of ErrFirstByteTimeout and
// ErrIdleTimeout.
type streamTimeoutSentinel struct{ msg string }

func (e *streamTimeoutSentinel) Error() string { return e.msg }

// Is reports whether target is deadline.ErrExceeded or
// context.DeadlineExceeded.
func (e *streamTimeoutSentinel) Is(target error) bool {
	return target == deadline.ErrExceeded || target == context.DeadlineExceeded
}

// streamTimeoutError is the error of one stream timeout: it says which
// Transport and how long, and unwraps to its sentinel.
type streamTimeoutError struct {
	sentinel error // ErrFirstByteTimeout or ErrIdleTimeout
	name     string
	timeout  time.Duration
}

// Error returns a message such as
// `httppolicy "llm": no first byte within 10s: httppolicy: first byte timeout exceeded`.
func (e *streamTimeoutError) Error() string {
	msg := "httppolicy"
	if e.name != "" {
		msg += " " + strconv.Quote(e.name)
	}
	if e.sentinel == ErrFirstByteTimeout {
		msg += ": no first byte within "
	} else {
		msg += ": no data for "
	}
	return msg + e.timeout.String() + ": " + e.sentinel.Error()
}

func (e *streamTimeoutError) Unwrap() error { return e.sentinel }

// Timeout reports true: the error is a timeout, in the sense of the
// net.Error interface.
func (e *streamTimeoutError) Timeout() bool { return true }

// ErrorType returns "timeout", the error.type recorded in telemetry.
func (e *streamTimeoutError) ErrorType() string { return telemetry.TypeTimeout }

// Telemetry kinds of the stream timeouts: the watertight.policy.kind of
// their watertight.timeouts counts and span events.
const (
	kindFirstByte = "first_byte"
	kindIdle      = "idle"
)

// streamTimeoutsKey is the context key of WithStreamTimeouts.
type streamTimeoutsKey struct{}

type streamTimeouts struct{ firstByte, idle time.Duration }

// WithStreamTimeouts returns a copy of ctx with which a request sent through
// a [Transport] uses firstByte and idle in place of the Transport's
// FirstByteTimeout and IdleTimeout; zero turns a timer off for the request.
// Use it where one value cannot fit every request, such as a completion
// that is not streamed, whose headers come only once the whole answer is
// ready. A negative value makes RoundTrip fail.
func WithStreamTimeouts(ctx context.Context, firstByte, idle time.Duration) context.Context {
	return context.WithValue(ctx, streamTimeoutsKey{}, streamTimeouts{firstByte, idle})
}

// streamTelemetry is the timeout records of one Transport, built on first
// use (a Transport has no constructor).
type streamTelemetry struct {
	firstByte, idle *telemetry.Timeout
}

// telemetry returns t's timeout records.
func (t *Transport) telemetry() *streamTelemetry {
	if st := t.tel.Load(); st != nil {
		return st
	}
	in := telemetry.NewInstruments(t.MeterProvider)
	st := &streamTelemetry{
		firstByte: telemetry.NewTimeout(in, kindFirstByte, t.Name),
		idle:      telemetry.NewTimeout(in, kindIdle, t.Name),
	}
	if !t.tel.CompareAndSwap(nil, st) {
		return t.tel.Load()
	}
	return st
}

// streamTimeoutsOf returns the stream timeouts of a request with context
// ctx sent through t, or an error naming the negative one.
func (t *Transport) streamTimeoutsOf(ctx context.Context) (streamTimeouts, error) {
	switch {
	case t.FirstByteTimeout < 0:
		return streamTimeouts{}, fmt.Errorf("httppolicy: Transport.FirstByteTimeout must be >= 0, got %v", t.FirstByteTimeout)
	case t.IdleTimeout < 0:
		return streamTimeouts{}, fmt.Errorf("httppolicy: Transport.IdleTimeout must be >= 0, got %v", t.IdleTimeout)
	}
	v, ok := ctx.Value(streamTimeoutsKey{}).(streamTimeouts)
	if !ok {
		return streamTimeouts{t.FirstByteTimeout, t.IdleTimeout}, nil
	}
	switch {
	case v.firstByte < 0:
		return v, fmt.Errorf("httppolicy: WithStreamTimeouts: firstByte must be >= 0, got %v", v.firstByte)
	case v.idle < 0:
		return v, fmt.Errorf("httppolicy: WithStreamTimeouts: idle must be >= 0, got %v", v.idle)
	}
	return v, nil
}

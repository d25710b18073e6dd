package httppolicy

import (
	"context"
	"time"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// ErrFirstByteTimeout is matched by the error of an attempt whose
// response did not bring its first byte within [Transport.FirstByteTimeout].
// It also matches [policy.ErrTimeout], [deadline.ErrExceeded] and
// [context.DeadlineExceeded].
var ErrFirstByteTimeout error = &streamTimeoutSentinel{msg: "httppolicy: first byte timeout exceeded"}

// ErrIdleTimeout is matched by the error of a body's Read that waited
// [Transport.IdleTimeout] for data. It also matches [policy.ErrTimeout],
// [deadline.ErrExceeded] and [context.DeadlineExceeded].
var ErrIdleTimeout error = &streamTimeoutSentinel{msg: "httppolicy: stream idle timeout exceeded"}

type streamTimeoutSentinel struct{ msg string }

func (e *streamTimeoutSentinel) Error() string { return e.msg }

func (e *streamTimeoutSentinel) Is(target error) bool {
	return target == policy.ErrTimeout || target == deadline.ErrExceeded || target == context.DeadlineExceeded
}

// streamTimeoutError is the error of one stream timeout. It unwraps to its
// sentinel.
type streamTimeoutError struct {
	sentinel error // ErrFirstByteTimeout or ErrIdleTimeout
	name     string
	timeout  time.Duration
}

// Error returns a message such as
// `httppolicy "llm": no first byte within 10s: httppolicy: first byte timeout exceeded`.
func (e *streamTimeoutError) Error() string {
	msg := telemetry.Label("httppolicy", e.name)
	if e.sentinel == ErrFirstByteTimeout {
		msg += ": no first byte within "
	} else {
		msg += ": no data for "
	}
	return msg + e.timeout.String() + ": " + e.sentinel.Error()
}

func (e *streamTimeoutError) Unwrap() error { return e.sentinel }

// Timeout reports true, as a net.Error does for a timeout.
func (e *streamTimeoutError) Timeout() bool { return true }

// ErrorType returns "timeout", the error.type recorded in telemetry.
func (e *streamTimeoutError) ErrorType() string { return telemetry.TypeTimeout }

type streamTimeoutsKey struct{}

type streamTimeouts struct{ firstByte, idle time.Duration }

// WithStreamTimeouts returns a copy of ctx whose requests use firstByte
// and idle in place of the Transport's FirstByteTimeout and IdleTimeout.
// Zero turns a timer off. A negative value makes RoundTrip fail.
func WithStreamTimeouts(ctx context.Context, firstByte, idle time.Duration) context.Context {
	return context.WithValue(ctx, streamTimeoutsKey{}, streamTimeouts{firstByte, idle})
}

// streamTelemetry is the timeout records of one Transport, by sentinel.
type streamTelemetry map[error]*telemetry.Timeout

// telemetry returns t's timeout records, built on first use.
func (t *Transport) telemetry() streamTelemetry {
	if st := t.tel.Load(); st != nil {
		return *st
	}
	in := telemetry.NewInstruments(t.MeterProvider)
	t.tel.CompareAndSwap(nil, &streamTelemetry{
		ErrFirstByteTimeout: telemetry.NewTimeout(in, "first_byte", t.Name),
		ErrIdleTimeout:      telemetry.NewTimeout(in, "idle", t.Name),
	})
	return *t.tel.Load()
}

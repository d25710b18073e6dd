package retry

import (
	"errors"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/watertight/watertight/internal/telemetry"
)

// ErrExhausted is matched, with [errors.Is], by every error a [Retry]
// returns when it gives up on a call that could otherwise have been retried:
// out of attempts, the schedule stopped, the next wait would pass the
// context's deadline, or the server asked for a wait longer than
// MaxInterval. The error also unwraps to the last attempt's error; see
// [ExhaustedError].
var ErrExhausted = errors.New("retry: exhausted")

// Reasons an [ExhaustedError] gives for giving up, in its Reason field.
const (
	// ReasonMaxAttempts means MaxAttempts attempts have failed.
	ReasonMaxAttempts = "max_attempts"
	// ReasonStopped means the schedule (Config.NewBackOff) returned
	// backoff.Stop.
	ReasonStopped = "stopped"
	// ReasonDeadline means the next wait would reach the context's deadline.
	ReasonDeadline = "deadline"
	// ReasonRetryAfter means the error asked for a wait longer than
	// MaxInterval.
	ReasonRetryAfter = "retry_after"
)

// ExhaustedError is the error a [Retry] returns when it gives up. It matches
// [ErrExhausted] with [errors.Is] and unwraps to the last attempt's error, so
// errors.Is and errors.As see through it to that error. Its ErrorType is
// telemetry's "retry_exhausted". A zero ExhaustedError is a valid, if
// uninformative, exhaustion. It is not modified after it is returned, so it
// may be read concurrently.
type ExhaustedError struct {
	// Name is the Config.Name of the policy that gave up.
	Name string
	// Attempts is the number of attempts that ran and failed.
	Attempts int
	// Reason says why it gave up: ReasonMaxAttempts, ReasonStopped,
	// ReasonDeadline or ReasonRetryAfter.
	Reason string
	// Wait is the wait that was refused (ReasonDeadline, ReasonRetryAfter);
	// zero otherwise.
	Wait time.Duration
	// MaxInterval is the policy's MaxInterval (for ReasonRetryAfter).
	MaxInterval time.Duration
	// Err is the last attempt's error.
	Err error
}

// Error returns a message such as
// `retry "llm": gave up after 3 attempts: <last error>`.
func (e *ExhaustedError) Error() string {
	msg := "retry"
	if e.Name != "" {
		msg += " " + strconv.Quote(e.Name)
	}
	msg += ": gave up after " + strconv.Itoa(e.Attempts) + " attempt"
	if e.Attempts != 1 {
		msg += "s"
	}
	switch e.Reason {
	case ReasonStopped:
		msg += ": the backoff schedule stopped"
	case ReasonDeadline:
		msg += ": next wait of " + e.Wait.String() + " would pass the deadline"
	case ReasonRetryAfter:
		msg += ": server asked to wait " + e.Wait.String() + ", more than MaxInterval " + e.MaxInterval.String()
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the last attempt's error.
func (e *ExhaustedError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrExhausted].
func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }

// ErrorType returns "retry_exhausted", the error.type recorded for it.
func (e *ExhaustedError) ErrorType() string { return telemetry.TypeExhausted }

// Permanent marks err as not to be retried: when an attempt returns it (or an
// error wrapping it), the call ends at once. If the marker is the error the
// attempt returned, the call returns err itself, unwrapped; if something
// wraps the marker (an attempt deadline's ExceededError, say), the call
// returns that wrapper, which still matches err with errors.Is. It
// returns nil if err is nil. It is backoff.Permanent, so errors marked with
// either are honoured by both packages; the result is a
// *backoff.PermanentError.
func Permanent(err error) error { return backoff.Permanent(err) }

// retryAfterError is the shape of an error that asks for the next wait, such
// as an HTTP 429 or 503 with a Retry-After header.
type retryAfterError interface {
	error
	RetryAfter() time.Duration
}

package retry

import (
	"errors"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// ErrExhausted is matched, with [errors.Is], by every error a [Retry]
// returns when it gives up on a call that could otherwise have been retried:
// out of attempts, the schedule stopped, the next wait would pass the
// context's deadline, the server asked for a wait longer than MaxInterval,
// an attempt was rejected after earlier attempts had run fn, or the retry
// budget refused the retry. The error also unwraps to the last error fn
// returned; see [ExhaustedError].
var ErrExhausted = errors.New("retry: exhausted")

// Reasons an [ExhaustedError] gives for giving up, in its Reason field.
const (
	// ReasonMaxAttempts means MaxAttempts attempts have failed.
	ReasonMaxAttempts = "max_attempts"
	// ReasonStopped means the schedule (Config.NewSchedule) said stop.
	ReasonStopped = "stopped"
	// ReasonDeadline means the next wait would reach the context's deadline.
	ReasonDeadline = "deadline"
	// ReasonRetryAfter means the error asked for a wait longer than
	// MaxInterval.
	ReasonRetryAfter = "retry_after"
	// ReasonRejected means an attempt was refused (an open breaker, a full
	// bulkhead: an error matching policy.ErrRejected) after earlier attempts
	// had run fn and failed. The call is not a rejection, since fn ran:
	// Err is fn's last error, and the refusal is in the Rejection field.
	ReasonRejected = "rejected"
	// ReasonBudget means the retry [Budget] (Config.Budget) refused the
	// retry: retries of the calls sharing it have used up what those calls
	// paid for. Err is fn's last error.
	ReasonBudget = "budget"
)

// ExhaustedError is the error a [Retry] returns when it gives up. It matches
// [ErrExhausted] with [errors.Is] and unwraps to the last error fn returned,
// so errors.Is and errors.As see through it to that error. Its ErrorType is
// telemetry's "retry_exhausted". A zero ExhaustedError is a valid, if
// uninformative, exhaustion. It is not modified after it is returned, so it
// may be read concurrently.
type ExhaustedError struct {
	// Kind is the kind of policy that gave up: "retry" (a [Retry]; also
	// when empty) or "hedge" (a [Hedge]).
	Kind string
	// Name is the Config.Name (or HedgeConfig.Name) of the policy that
	// gave up.
	Name string
	// Attempts is the number of attempts that ran fn and failed. With
	// ReasonRejected, the rejected attempt, which did not run fn, is not
	// counted.
	Attempts int
	// Reason says why it gave up: ReasonMaxAttempts, ReasonStopped,
	// ReasonDeadline, ReasonRetryAfter, ReasonRejected or ReasonBudget.
	Reason string
	// Wait is the wait that was refused (ReasonDeadline, ReasonRetryAfter);
	// zero otherwise.
	Wait time.Duration
	// MaxInterval is the policy's MaxInterval (for ReasonRetryAfter).
	MaxInterval time.Duration
	// Err is the last error fn returned.
	Err error
	// Rejection is, with ReasonRejected, the refusal of the attempt after
	// Err: the *policy.RejectedError that errors.As finds in the rejected
	// attempt's error. It is nil for the other reasons, and also when the
	// rejected attempt's error matches policy.ErrRejected without holding a
	// *policy.RejectedError (a user-written policy's bare sentinel, say).
	// It is not in the Unwrap chain, on purpose: fn ran, so
	// errors.Is(err, policy.ErrRejected) is false for an ExhaustedError.
	// Like every RejectedError, it must not be modified.
	Rejection *policy.RejectedError
}

// Error returns a message such as
// `retry "llm": gave up after 3 attempts: <last error>`, or, with
// ReasonRejected, `retry "llm": gave up after 1 attempt: attempt 2 was
// rejected (breaker "llm" rejected the call: open): <last error>`.
func (e *ExhaustedError) Error() string {
	msg := Kind
	if e.Kind != "" {
		msg = e.Kind
	}
	if e.Name != "" {
		msg += " " + strconv.Quote(e.Name)
	}
	msg += ": gave up after " + strconv.Itoa(e.Attempts) + " attempt"
	if e.Attempts != 1 {
		msg += "s"
	}
	switch e.Reason {
	case ReasonStopped:
		msg += ": the schedule stopped"
	case ReasonDeadline:
		msg += ": next wait of " + e.Wait.String() + " would pass the deadline"
	case ReasonRetryAfter:
		msg += ": server asked to wait " + e.Wait.String() + ", more than MaxInterval " + e.MaxInterval.String()
	case ReasonBudget:
		msg += ": the retry budget is spent"
	case ReasonRejected:
		msg += ": attempt " + strconv.Itoa(e.Attempts+1) + " was rejected"
		if e.Rejection != nil {
			msg += " (" + e.Rejection.Error() + ")"
		}
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the last error fn returned.
func (e *ExhaustedError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrExhausted].
func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }

// ErrorType returns "retry_exhausted", the error.type recorded for it.
func (e *ExhaustedError) ErrorType() string { return telemetry.TypeExhausted }

// Permanent marks err as not to be retried: when an attempt returns it (or an
// error wrapping it), the call ends at once. If the marker is the error the
// attempt returned, the call returns err itself, unwrapped (see [Unmark]);
// if something wraps the marker (an attempt deadline's ExceededError, say),
// the call returns that wrapper, which still matches err with errors.Is.
//
// The marker has err's message, and errors.Is and errors.As see through it
// to err; its type is unexported, so it is recognised only by this package
// (a Retry finds it anywhere in an attempt's error chain). Permanent returns
// nil if err is nil, and err itself if err is already such a marker. It is
// safe for concurrent use.
//
// A Retry also honours the markers of github.com/cenkalti/backoff/v4's
// Permanent, and strips them the same way, so that errors marked for
// backoff keep working; new code should use Permanent.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*permanentError); ok {
		return err
	}
	return &permanentError{err: err}
}

// permanentError is the marker [Permanent] puts on an error.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Unmark returns the error that err marks as permanent, if err itself is a
// marker made by [Permanent] (or by backoff/v4's Permanent, which a Retry
// also honours); err wrapped so that no Retry honours a marker inside it,
// if a marker lies deeper in err's chain; and err unchanged otherwise, nil
// included. A marker deeper in the chain cannot be taken off, because what
// wraps it carries meaning of its own (an attempt deadline's ExceededError
// around a permanent failure must still match deadline.ErrExceeded); the
// wrapper keeps err's message, and errors.Is and errors.As see through it.
// err itself is never modified. A Retry unmarks every error it returns
// this way, so a marker fn put on its error stops that Retry and no other:
// an outer Retry (one around a whole request and the reading of its body,
// say) sees the error as any other. Code that runs an fn which may mark
// its errors without a Retry above it (an HTTP transport whose policy may
// have no retry) calls Unmark for the same reason. Unmark is safe for
// concurrent use.
func Unmark(err error) error {
	for {
		switch p := err.(type) {
		case *permanentError:
			err = p.err
		case *backoff.PermanentError:
			if p.Err == nil {
				// A hand-built marker around nothing: an error all the
				// same, never nil, which would read as success.
				return err
			}
			err = p.Err
		default:
			if isPermanent(err) {
				return &settled{err}
			}
			return err
		}
	}
}

// settled is an error a Retry has ended on: the markers inside it are
// honoured no more (see Unmark).
type settled struct{ err error }

func (e *settled) Error() string { return e.err.Error() }
func (e *settled) Unwrap() error { return e.err }

// isPermanent reports whether a marker, Permanent's or backoff's, is in
// err's chain (through Unwrap() error and Unwrap() []error, as errors.Is
// walks it) and not inside an error a Retry has settled.
func isPermanent(err error) bool {
	for err != nil {
		switch e := err.(type) {
		case *permanentError, *backoff.PermanentError:
			return true
		case *settled:
			return false
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				if isPermanent(x) {
					return true
				}
			}
			return false
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		default:
			return false
		}
	}
	return false
}

// retryAfterError is the shape of an error that asks for the next wait, such
// as an HTTP 429 or 503 with a Retry-After header.
type retryAfterError interface {
	error
	RetryAfter() time.Duration
}

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
// returns when it gives up on a call that could otherwise have been
// retried. The reasons are listed with [ReasonMaxAttempts]. The error also
// unwraps to the last error fn returned; see [ExhaustedError].
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
	// ReasonRejected means an attempt was refused (its error matched
	// policy.ErrRejected) after earlier attempts had run fn and failed.
	// The call is not a rejection, since fn ran: Err is fn's last error,
	// and the refusal is in the Rejection field.
	ReasonRejected = "rejected"
	// ReasonBudget means the retry [Budget] (Config.Budget) refused the
	// retry. Err is fn's last error.
	ReasonBudget = "budget"
)

// ExhaustedError is the error a [Retry] or [Hedge] returns when it gives
// up. It matches [ErrExhausted] with [errors.Is] and unwraps to the last
// error fn returned. Its ErrorType is "retry_exhausted". The zero value is
// a valid, if uninformative, exhaustion. It is not modified after it is
// returned, so it may be read concurrently.
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
	// Rejection is, with ReasonRejected, the *policy.RejectedError that
	// errors.As finds in the rejected attempt's error. It is nil for the
	// other reasons, and when that error holds none (a bare sentinel). It
	// is not in the Unwrap chain: fn ran, so errors.Is(err,
	// policy.ErrRejected) is false for an ExhaustedError. It must not be
	// modified.
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

// Permanent marks err as not to be retried: when an attempt returns it,
// or an error wrapping it, the call ends at once. If the marker is the
// error the attempt returned, the call returns err itself (see [Unmark]).
// If something wraps the marker (an attempt deadline's ExceededError,
// say), the call returns that wrapper, which still matches err.
//
// The marker has err's message, and errors.Is and errors.As see through it
// to err. A Retry finds it anywhere in an attempt's error chain. Permanent
// returns nil if err is nil, and err itself if err is already a marker. It
// is safe for concurrent use.
//
// A Retry also honours and strips the markers of
// github.com/cenkalti/backoff/v4's Permanent.
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

// Unmark takes a permanent marker off err. If err itself is a marker made
// by [Permanent] (or by backoff/v4's Permanent), Unmark returns the error
// it marks. If a marker lies deeper in err's chain, Unmark returns err
// wrapped so that no Retry honours that marker; the wrapper keeps err's
// message, and errors.Is and errors.As see through it. Otherwise it
// returns err unchanged, nil included. err itself is never modified.
//
// A Retry unmarks every error it returns, so a marker stops the nearest
// Retry and no other. Code that runs an fn that may mark its errors,
// without a Retry above it, should call Unmark too. Unmark is safe for
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

package retry

import (
	"cmp"
	"errors"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// ErrExhausted is matched by every [*ExhaustedError].
var ErrExhausted = errors.New("retry: exhausted")

// Reasons for giving up, in [ExhaustedError].Reason.
const (
	ReasonMaxAttempts = "max_attempts" // MaxAttempts attempts failed
	ReasonStopped     = "stopped"      // the Schedule stopped
	ReasonDeadline    = "deadline"     // the next wait would reach ctx's deadline
	ReasonRetryAfter  = "retry_after"  // the error asked for a wait over MaxInterval
	ReasonRejected    = "rejected"     // an attempt was refused after fn had run
	ReasonBudget      = "budget"       // the Budget refused the retry
)

// ExhaustedError is the error of a [Retry] or a hedge.Hedge that gave up. It
// matches [ErrExhausted] and unwraps to fn's last error. It is not
// modified once returned, so it may be read concurrently.
type ExhaustedError struct {
	Kind     string // "retry" (also when empty) or "hedge"
	Name     string // the policy's Name
	Attempts int    // attempts that ran fn and failed
	Reason   string // one of the Reason constants
	Err      error  // fn's last error

	// Rejection is, with ReasonRejected, the *policy.RejectedError in the
	// refused attempt's error, if any. It is outside the Unwrap chain, so
	// the ExhaustedError does not match policy.ErrRejected.
	Rejection *policy.RejectedError

	wait, maxInterval time.Duration // for the message
}

// Error returns a message such as
// `retry "llm": gave up after 3 attempts: <last error>`.
func (e *ExhaustedError) Error() string {
	msg := telemetry.Label(cmp.Or(e.Kind, "retry"), e.Name) + ": gave up after " + strconv.Itoa(e.Attempts) + " attempt"
	if e.Attempts != 1 {
		msg += "s"
	}
	switch e.Reason {
	case ReasonStopped:
		msg += ": the schedule stopped"
	case ReasonDeadline:
		msg += ": next wait of " + e.wait.String() + " would pass the deadline"
	case ReasonRetryAfter:
		msg += ": server asked to wait " + e.wait.String() + ", more than MaxInterval " + e.maxInterval.String()
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

// Unwrap returns Err.
func (e *ExhaustedError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrExhausted]. It also matches the mark
// by which a Deadline returns an exhaustion unchanged.
func (e *ExhaustedError) Is(target error) bool {
	return target == ErrExhausted || target == stage.ErrGaveUp
}

// ErrorType returns "retry_exhausted".
func (e *ExhaustedError) ErrorType() string { return telemetry.TypeExhausted }

// Permanent marks err as not to be retried: a Retry that finds the marker
// in an attempt's error chain ends the call with that error, unmarked
// (see [Unmark]). The marker has err's message, and errors.Is and
// errors.As see through it. Permanent returns nil for nil, and err itself
// if err is a marker.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*permanentError); ok {
		return err
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Unmark takes the permanent markers off err, those of
// github.com/cenkalti/backoff/v4's Permanent included. It strips the
// markers around err. If a marker lies deeper in what is left, it wraps
// that so that no Retry honours the marker; the wrapper keeps the message,
// and errors.Is and errors.As see through it. A backoff marker around nil
// is returned as is. Unmark never modifies err.
func Unmark(err error) error {
	for {
		switch p := err.(type) {
		case *permanentError:
			err = p.err
		case *backoff.PermanentError:
			if p.Err == nil {
				return err // a marker around nothing is still an error
			}
			err = p.Err
		default:
			if IsPermanent(err) {
				return &settled{err}
			}
			return err
		}
	}
}

// settled wraps an error whose markers no Retry honours.
type settled struct{ err error }

func (e *settled) Error() string { return e.err.Error() }
func (e *settled) Unwrap() error { return e.err }

// IsPermanent reports whether err carries a marker of [Permanent] (or of
// backoff's) that a Retry would honour: one in err's chain, outside an
// error [Unmark] settled.
func IsPermanent(err error) bool {
	for err != nil {
		switch e := err.(type) {
		case *permanentError, *backoff.PermanentError:
			return true
		case *settled:
			return false
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				if IsPermanent(x) {
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

// retryAfterError is an error that asks for the next wait, such as a 429
// with a Retry-After header.
type retryAfterError interface {
	error
	RetryAfter() time.Duration
}

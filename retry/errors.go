package retry

import (
	"cmp"
	"errors"
	"strconv"
	"time"

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

// retryAfterError is an error that asks for the next wait, such as a 429
// with a Retry-After header.
type retryAfterError interface {
	error
	RetryAfter() time.Duration
}

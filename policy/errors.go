package policy

import (
	"errors"
	"strconv"
)

// ErrRejected is matched, with [errors.Is], by every error a policy returns
// when it refuses to run fn at all: a full bulkhead, an open breaker. It is
// also matched by each policy package's own rejection sentinel, such as
// bulkhead.ErrFull and breaker.ErrOpen. A timeout is not a rejection: fn ran.
//
// Retries never retry a rejection, and the default breaker does not count one
// as a failure of the dependency.
var ErrRejected = errors.New("policy: call rejected")

// ErrThrottled is matched, with [errors.Is], by the error of a call that
// the dependency answered by asking to slow down. httppolicy's
// *StatusError for a 429 Too Many Requests matches it, and so may a user's
// own errors, through an Is method. fn ran, so it does not match
// [ErrRejected]. It is retried like any failure, but the default breaker
// does not count it as a failure of the dependency. A 503 Service
// Unavailable does not match it.
var ErrThrottled = errors.New("policy: throttled")

// NewSentinel returns a sentinel error with the message msg that also matches
// [ErrRejected] with [errors.Is]. Policy packages use it for their rejection
// sentinels (bulkhead.ErrFull, breaker.ErrOpen).
func NewSentinel(msg string) error {
	return &sentinel{msg: msg}
}

type sentinel struct{ msg string }

func (s *sentinel) Error() string        { return s.msg }
func (s *sentinel) Is(target error) bool { return target == ErrRejected }

// RejectedError describes one rejection: which policy refused the call and
// why. Every rejection returned by a watertight policy unwraps to one
// (errors.As), and matches both [ErrRejected] and the rejecting package's
// sentinel (errors.Is).
//
// Policies return the same pointer for every rejection with the same
// reason, so rejecting costs no allocation; callers must not modify one. The zero value is a valid
// rejection with no kind, name or reason that matches only ErrRejected.
type RejectedError struct {
	// Kind is the kind of policy that refused the call: "bulkhead",
	// "breaker", or a user-written policy's own kind.
	Kind string
	// Name is the name of the policy instance, from its Config.
	Name string
	// Reason is a short, low-cardinality word: "full", "wait_timeout",
	// "open", "half_open_full".
	Reason string

	sentinel error
	msg      string // Error's result, built by NewRejectedError
}

// NewRejectedError returns a RejectedError that matches sentinel (which may
// be nil) as well as [ErrRejected] with [errors.Is].
func NewRejectedError(kind, name, reason string, sentinel error) *RejectedError {
	e := &RejectedError{Kind: kind, Name: name, Reason: reason, sentinel: sentinel}
	// Built once: a rejection's message is read for every traced rejection.
	e.msg = e.message()
	return e
}

// Error returns a message such as `bulkhead "llm" rejected the call: full`.
func (e *RejectedError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return e.message()
}

func (e *RejectedError) message() string {
	kind := e.Kind
	if kind == "" {
		kind = "policy"
	}
	msg := kind
	if e.Name != "" {
		msg += " " + strconv.Quote(e.Name)
	}
	msg += " rejected the call"
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Is reports whether target is [ErrRejected] or the sentinel the error was
// built with.
func (e *RejectedError) Is(target error) bool {
	return target == ErrRejected || (e.sentinel != nil && target == e.sentinel)
}

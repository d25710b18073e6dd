package policy

import (
	"cmp"
	"errors"
	"strconv"
)

// ErrRejected is matched by every error a policy returns when it refuses
// to run fn at all, and by each policy's own rejection sentinel (such as
// bulkhead.ErrFull). A timeout is not a rejection: fn ran. Retries never
// retry a rejection, and a breaker does not count one as a failure.
var ErrRejected = errors.New("policy: call rejected")

// ErrThrottled is matched by the error of a call that the dependency
// answered by asking to slow down, such as httppolicy's error for a 429.
// It does not match [ErrRejected]: fn ran. It is retried like any failure.
// The default breaker does not count it as a failure.
var ErrThrottled = errors.New("policy: throttled")

// ErrQuotaSpent is matched by the error of a call that the dependency
// refused because the caller's quota, credit or spend limit is used up,
// such as httppolicy's error for an OpenAI 429 whose error code is
// insufficient_quota, or for a 402. It does not match [ErrRejected] or
// [ErrThrottled]: waiting does not help until someone pays. A retry or a
// hedge does not try it again, the default breaker does not count it, and
// fallback's default moves on to the next alternative.
var ErrQuotaSpent = errors.New("policy: quota spent")

// NewSentinel returns an error with the message msg that matches
// [ErrRejected].
func NewSentinel(msg string) error {
	return &sentinel{msg: msg}
}

type sentinel struct{ msg string }

func (s *sentinel) Error() string        { return s.msg }
func (s *sentinel) Is(target error) bool { return target == ErrRejected }

// RejectedError describes one rejection: which policy refused the call and
// why. It matches [ErrRejected] and the sentinel it was built with. A
// policy returns the same pointer for every rejection with the same
// reason: do not modify one. The zero value matches only ErrRejected.
type RejectedError struct {
	Kind   string // the kind of policy: "bulkhead", "breaker", ...
	Name   string // the policy's Config.Name
	Reason string // a short, low-cardinality word: "full", "open", ...

	sentinel error
	msg      string
}

// NewRejectedError returns a RejectedError that matches sentinel (which may
// be nil) as well as [ErrRejected].
func NewRejectedError(kind, name, reason string, sentinel error) *RejectedError {
	e := &RejectedError{Kind: kind, Name: name, Reason: reason, sentinel: sentinel}
	e.msg = e.Error()
	return e
}

// Error returns a message such as `bulkhead "llm" rejected the call: full`.
func (e *RejectedError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	msg := cmp.Or(e.Kind, "policy")
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

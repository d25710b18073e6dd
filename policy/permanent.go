package policy

import "github.com/cenkalti/backoff/v4"

// Permanent marks err as not to be retried: a retry or hedge that finds the
// marker in an attempt's error chain ends the call with that error,
// unmarked (see [Unmark]). The marker has err's message, and errors.Is and
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

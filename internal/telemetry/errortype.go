package telemetry

import (
	"context"
	"errors"
	"strconv"

	"github.com/watertight/watertight/policy"
)

// Error types recorded as error.type: few and fixed, as the semantic
// conventions ask.
const (
	TypeRejected  = "rejected"
	TypeTimeout   = "timeout"
	TypeCanceled  = "canceled"
	TypeExhausted = "retry_exhausted"
	TypeAborted   = "aborted"
	TypeOther     = "_OTHER"
)

// ErrorType classifies err (non-nil) for the error.type attribute. An
// error with an ErrorType method names its own.
func ErrorType(err error) string {
	var typer interface{ ErrorType() string }
	switch {
	case errors.Is(err, policy.ErrAborted):
		return TypeAborted
	case errors.As(err, &typer):
		return typer.ErrorType()
	case errors.Is(err, policy.ErrRejected):
		return TypeRejected
	case errors.Is(err, context.DeadlineExceeded):
		return TypeTimeout
	case errors.Is(err, context.Canceled):
		return TypeCanceled
	}
	return TypeOther
}

// Label returns kind, followed by the quoted name if there is one: the
// start of a policy's error messages, such as `deadline "search"`.
func Label(kind, name string) string {
	if name == "" {
		return kind
	}
	return kind + " " + strconv.Quote(name)
}

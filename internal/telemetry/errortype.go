package telemetry

import (
	"context"
	"errors"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// ErrorTyper is implemented by watertight errors that know their error.type.
type ErrorTyper interface {
	ErrorType() string
}

// Error types recorded as error.type. They are few and fixed, as the
// semantic conventions ask: an error's Go type is not used, since
// context.Canceled and most errors.New values share one.
const (
	TypeRejected  = "rejected"
	TypeTimeout   = "timeout"
	TypeCanceled  = "canceled"
	TypeExhausted = "retry_exhausted"
	TypeAborted   = "aborted"
	TypeOther     = "_OTHER"
)

// ErrorType classifies err (non-nil) for the error.type attribute.
func ErrorType(err error) string {
	var typer ErrorTyper
	switch {
	case errors.Is(err, stage.ErrAborted):
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

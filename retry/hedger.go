package retry

import (
	"context"
	"errors"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// hedger is the face of a Hedge whose attempts package compose runs
// through the slots below it (see internal/stage): unexported, so that
// Hedge's own API is Execute alone.
type hedger Hedge

var _ stage.Hedger = (*hedger)(nil)

func init() {
	stage.RegisterHedger(func(p policy.Policy) stage.Hedger {
		if h, ok := p.(*Hedge); ok && h != nil {
			return (*hedger)(h)
		}
		return nil
	})
}

func (h *hedger) Execute(ctx context.Context, fn policy.Func) error {
	return (*Hedge)(h).Execute(ctx, fn)
}

// Hedge runs one call as Execute does, attempt n running attempt(actx, n).
func (h *hedger) Hedge(ctx context.Context, attempt stage.AttemptFunc) error {
	if ctx == nil {
		panic("retry: nil Context")
	}
	if attempt == nil {
		panic("retry: nil attempt")
	}
	return (*Hedge)(h).call(ctx, nil, attempt)
}

// Lost reports whether the attempt of ctx was canceled because its call
// ended without it: the cause is ErrHedgeLost.
func (h *hedger) Lost(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), ErrHedgeLost)
}

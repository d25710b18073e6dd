package ratelimit

import (
	"context"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// twoPhase is the face of a Limiter that package compose runs in two
// phases (see internal/stage): unexported, so that Limiter's own API is
// Execute alone.
type twoPhase Limiter

func init() {
	stage.Register(func(p policy.Policy) (stage.Stage, stage.Repeater) {
		if x, ok := p.(*Limiter); ok && x != nil {
			return (*twoPhase)(x), nil
		}
		return nil, nil
	})
}

func (t *twoPhase) Execute(ctx context.Context, fn policy.Func) error {
	return (*Limiter)(t).Execute(ctx, fn)
}

func (t *twoPhase) Enter(ctx context.Context) (context.Context, stage.Token, error) {
	token, err := (*Limiter)(t).enter(ctx)
	return ctx, token, err
}

func (t *twoPhase) Exit(_ context.Context, token stage.Token, err error) error {
	return (*Limiter)(t).exit(token, err)
}

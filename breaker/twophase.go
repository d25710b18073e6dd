package breaker

import (
	"context"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// twoPhase is the face of a Breaker that package compose runs in two phases
// (see internal/stage): unexported, so that Breaker's own API is Execute
// alone.
type twoPhase Breaker

func init() {
	stage.Register(func(p policy.Policy) (stage.Stage, stage.Repeater) {
		if x, ok := p.(*Breaker); ok && x != nil {
			return (*twoPhase)(x), nil
		}
		return nil, nil
	})
}

func (t *twoPhase) Execute(ctx context.Context, fn policy.Func) error {
	return (*Breaker)(t).Execute(ctx, fn)
}

func (t *twoPhase) Enter(ctx context.Context) (context.Context, stage.Token, error) {
	return (*Breaker)(t).enter(ctx)
}

func (t *twoPhase) Exit(ctx context.Context, token stage.Token, err error) error {
	return (*Breaker)(t).exit(ctx, token, err)
}

package bulkhead

import (
	"context"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// twoPhase is the face of a Bulkhead that package compose runs in two phases
// (see internal/stage): unexported, so that Bulkhead's own API is Execute
// alone.
type twoPhase Bulkhead

func init() {
	stage.Register(func(p policy.Policy) (stage.Stage, stage.Repeater) {
		if x, ok := p.(*Bulkhead); ok && x != nil {
			return (*twoPhase)(x), nil
		}
		return nil, nil
	})
}

func (t *twoPhase) Execute(ctx context.Context, fn policy.Func) error {
	return (*Bulkhead)(t).Execute(ctx, fn)
}

func (t *twoPhase) Enter(ctx context.Context) (context.Context, stage.Token, error) {
	return (*Bulkhead)(t).enter(ctx)
}

func (t *twoPhase) Exit(ctx context.Context, token stage.Token, err error) error {
	return (*Bulkhead)(t).exit(ctx, token, err)
}

package deadline

import (
	"context"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// twoPhase is the face of a Deadline that package compose runs in two phases
// (see internal/stage): unexported, so that Deadline's own API is Execute
// alone.
type twoPhase Deadline

func init() {
	stage.Register(func(p policy.Policy) (stage.Stage, stage.Repeater) {
		if x, ok := p.(*Deadline); ok && x != nil {
			return (*twoPhase)(x), nil
		}
		return nil, nil
	})
}

func (t *twoPhase) Execute(ctx context.Context, fn policy.Func) error {
	return (*Deadline)(t).Execute(ctx, fn)
}

func (t *twoPhase) Enter(ctx context.Context) (context.Context, stage.Token, error) {
	return (*Deadline)(t).enter(ctx)
}

func (t *twoPhase) Exit(ctx context.Context, token stage.Token, err error) error {
	return (*Deadline)(t).exit(ctx, token, err)
}

package retry

import (
	"context"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// repeater is the face of a Retry whose loop package compose drives itself
// (see internal/stage): unexported, so that Retry's own API is Execute
// alone.
type repeater Retry

func init() {
	stage.Register(func(p policy.Policy) (stage.Stage, stage.Repeater) {
		if r, ok := p.(*Retry); ok && r != nil {
			return nil, (*repeater)(r)
		}
		return nil, nil
	})
}

func (r *repeater) Execute(ctx context.Context, fn policy.Func) error {
	return (*Retry)(r).Execute(ctx, fn)
}

func (r *repeater) AttemptContext(ctx context.Context, n int) context.Context {
	return (*Retry)(r).attemptContext(ctx, n)
}

func (r *repeater) Next(ctx context.Context, n int, err error, state stage.Token) (bool, stage.Token, error) {
	return (*Retry)(r).next(ctx, n, err, state)
}

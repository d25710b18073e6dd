package adaptive

import (
	"context"
	"time"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// twoPhase is the face of a Limiter that package compose runs in two phases
// (see internal/stage) and tells the latency of each attempt
// (stage.Observer): unexported, so that Limiter's own API is Execute alone.
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
	return (*Limiter)(t).enter(ctx)
}

func (t *twoPhase) Exit(ctx context.Context, token stage.Token, err error) error {
	return (*Limiter)(t).exit(ctx, token, err)
}

// Observe is told by compose the latency of each attempt run between Enter
// and Exit, with failed set for a failure that is not a timeout.
func (t *twoPhase) Observe(d time.Duration, failed bool) {
	(*Limiter)(t).observe(d, failed, time.Time{})
}

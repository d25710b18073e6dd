package breaker

import (
	"context"

	"github.com/watertight/watertight/internal/stage"
)

// Enter and Exit give the tests the two phases compose runs.
func (b *Breaker) Enter(ctx context.Context) (context.Context, stage.Token, error) {
	return b.enter(ctx)
}

func (b *Breaker) Exit(ctx context.Context, token stage.Token, err error) error {
	return b.exit(ctx, token, err)
}

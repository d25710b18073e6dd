package deadline

import (
	"context"

	"github.com/watertight/watertight/internal/stage"
)

// Enter and Exit give the tests the two phases compose runs.
func (d *Deadline) Enter(ctx context.Context) (context.Context, stage.Token, error) {
	return d.enter(ctx)
}

func (d *Deadline) Exit(ctx context.Context, token stage.Token, err error) error {
	return d.exit(ctx, token, err)
}

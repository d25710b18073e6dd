package breaker

import (
	"context"

	"github.com/watertight/watertight/internal/stage"
)

// UseTwoStep makes Execute take the two-step path (policy.Run over Enter and
// Exit) that it falls back to when gobreaker's layout is not the expected
// one, so that the tests cover both. Call it before b is used.
func UseTwoStep(b *Breaker) {
	b.twoStep = true
	b.cb.Store(b.newMachine())
}

// OneStep reports whether b's Execute takes the one-step path.
func OneStep(b *Breaker) bool { return b.cb.Load().one != nil }

// Enter and Exit give the tests the two phases compose runs.
func (b *Breaker) Enter(ctx context.Context) (context.Context, stage.Token, error) {
	return b.enter(ctx)
}

func (b *Breaker) Exit(ctx context.Context, token stage.Token, err error) error {
	return b.exit(ctx, token, err)
}

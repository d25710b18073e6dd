package breaker

import "context"

// Enter and Exit are Allow and Done in the shape of the two steps compose
// runs, as the tests use them.
func (b *Breaker) Enter(ctx context.Context) (context.Context, Permit, error) {
	p, err := b.Allow(ctx)
	return ctx, p, err
}

func (b *Breaker) Exit(_ context.Context, p Permit, err error) error { return p.Done(err) }

package bulkhead

import "context"

// Enter and Exit are Acquire and Release in the shape of the two steps
// compose runs, as the tests use them.
func (b *Bulkhead) Enter(ctx context.Context) (context.Context, Permit, error) {
	p, err := b.Acquire(ctx)
	return ctx, p, err
}

func (b *Bulkhead) Exit(_ context.Context, _ Permit, err error) error {
	p := Permit{b: b}
	p.Release()
	return err
}

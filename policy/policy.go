package policy

import "context"

// Func is the unit of work a [Policy] guards: one call to a dependency. It
// must honour ctx: return soon after ctx is done, with an error.
type Func func(ctx context.Context) error

// Policy guards calls to one dependency. Execute runs fn under the policy and
// returns fn's error, or an error of the policy's own if the policy refused to
// run fn (see [ErrRejected]) or cut it short.
//
// Implementations must be safe for concurrent use by multiple goroutines and
// keep the contract in the package documentation.
type Policy interface {
	Execute(ctx context.Context, fn Func) error
}

// Do runs fn under p and returns fn's result. On error it returns the zero
// value of T, even if fn returned something else with the error. A value from
// an attempt that failed is never returned: only the value of the attempt
// that succeeded.
func Do[T any](ctx context.Context, p Policy, fn func(context.Context) (T, error)) (T, error) {
	if p == nil {
		panic("policy: nil Policy")
	}
	if fn == nil {
		panic("policy: nil fn")
	}
	var out T
	err := p.Execute(ctx, func(ctx context.Context) error {
		// A value kept from an earlier attempt must not outlive that
		// attempt's result, whatever a policy makes of the outcome.
		var zero T
		out = zero
		v, err := fn(ctx)
		if err != nil {
			return err
		}
		out = v
		return nil
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

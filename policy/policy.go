package policy

import "context"

// Func is the unit of work a [Policy] guards: one call to a dependency. It
// must honour ctx: return soon after ctx is done, with an error.
type Func func(ctx context.Context) error

// Policy guards calls to one dependency. Execute runs fn under the policy.
// It returns fn's error, or an error of its own if it refused to run fn
// (see [ErrRejected]) or cut it short.
//
// Implementations must be safe for concurrent use by multiple goroutines and
// keep the contract in the package documentation.
type Policy interface {
	Execute(ctx context.Context, fn Func) error
}

// Do runs fn under p and returns fn's result: the value of the last call
// of fn, if p returns nil. On error it returns the zero value of T, even
// if fn returned something else with the error. p must call fn one call at
// a time, as the package documentation says; to run attempts
// concurrently, use retry.Hedged. Do panics if p or fn is nil.
func Do[T any](ctx context.Context, p Policy, fn func(context.Context) (T, error)) (T, error) {
	if p == nil {
		panic("policy: nil Policy")
	}
	if fn == nil {
		panic("policy: nil fn")
	}
	var out T
	err := p.Execute(ctx, func(ctx context.Context) error {
		v, err := fn(ctx)
		if err != nil {
			// A policy that turns this failure into a success must not
			// return the failed attempt's value, nor an earlier one's.
			var zero T
			v = zero
		}
		out = v
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

package policy

import "context"

// Func is one call to a dependency. It must return soon after ctx is done,
// with an error.
type Func func(ctx context.Context) error

// Policy guards calls to one dependency. Execute runs fn under the policy
// and returns fn's error, or an error of its own if it refused to run fn
// or cut it short. Implementations must be safe for concurrent use and
// keep the contract in the package documentation.
type Policy interface {
	Execute(ctx context.Context, fn Func) error
}

// Do runs fn under p and returns the value of the last call of fn. On
// error it returns the zero value of T. Do panics if p or fn is nil.
func Do[T any](ctx context.Context, p Policy, fn func(context.Context) (T, error)) (T, error) {
	if p == nil {
		panic("policy: nil Policy")
	}
	if fn == nil {
		panic("policy: nil fn")
	}
	var out, zero T
	err := p.Execute(ctx, func(ctx context.Context) error {
		var err error
		out, err = fn(ctx)
		if err != nil {
			// A policy may turn this failure into a success: drop its value.
			out = zero
		}
		return err
	})
	if err != nil {
		return zero, err
	}
	return out, nil
}

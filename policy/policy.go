package policy

import (
	"context"
	"sync"
)

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

// Claimer names the winner among attempts of one call that run
// concurrently (a hedge's): see [WithClaimer].
type Claimer interface {
	// Claim reports whether the attempt may publish its result as the
	// call's: true for one attempt of the call at most at any time, and
	// again for that attempt if asked again. It is called from the
	// attempt's goroutine, after fn succeeded.
	Claim() bool
}

// claimerKey is the context key of an attempt's Claimer.
type claimerKey struct{}

// WithClaimer returns a copy of ctx for one attempt of a call whose
// attempts run concurrently, carrying c, the attempt's Claimer: code that
// publishes a result by side effect, as [Do] does, asks [Claim] before it
// publishes. A policy that runs fn concurrently with itself must give each
// attempt such a context and must make the attempt whose Claim returned
// true the call's outcome if it succeeds. It panics if ctx or c is nil.
func WithClaimer(ctx context.Context, c Claimer) context.Context {
	if ctx == nil {
		panic("policy: nil Context")
	}
	if c == nil {
		panic("policy: nil Claimer")
	}
	return context.WithValue(ctx, claimerKey{}, c)
}

// Claim reports whether the attempt ctx belongs to may publish its result
// as the call's: the answer of the attempt's [Claimer], or true if ctx
// carries none (attempts that run one at a time each publish in turn, the
// last one's result standing). Call it once the attempt has succeeded, and
// publish only if it returns true. It panics if ctx is nil.
func Claim(ctx context.Context) bool {
	if ctx == nil {
		panic("policy: nil Context")
	}
	if c, ok := ctx.Value(claimerKey{}).(Claimer); ok {
		return c.Claim()
	}
	return true
}

// doState is the result a call of Do publishes: only the winning attempt
// writes it, and nothing does once Do has read it.
type doState[T any] struct {
	mu     sync.Mutex
	out    T
	closed bool
}

// Do runs fn under p and returns fn's result. On error it returns the zero
// value of T, even if fn returned something else with the error. A value from
// an attempt that failed is never returned: only the value of the attempt
// that succeeded. When p runs attempts concurrently (a hedge), only the
// winning attempt's value is published (see [Claim]): a losing attempt that
// succeeds, before or after Do has returned, publishes nothing.
func Do[T any](ctx context.Context, p Policy, fn func(context.Context) (T, error)) (T, error) {
	if p == nil {
		panic("policy: nil Policy")
	}
	if fn == nil {
		panic("policy: nil fn")
	}
	st := new(doState[T])
	err := p.Execute(ctx, func(ctx context.Context) error {
		c, concurrent := ctx.Value(claimerKey{}).(Claimer)
		if !concurrent {
			// Attempts one at a time, each before Execute returns: a value
			// kept from an earlier attempt must not outlive that attempt's
			// result, whatever a policy makes of the outcome.
			var zero T
			st.out = zero
		}
		v, err := fn(ctx)
		if err != nil {
			return err
		}
		if concurrent {
			if !c.Claim() {
				return nil
			}
			// A winner whose success a policy below the hedge then turned
			// into a failure gives its claim back; the value it wrote stays
			// until a later winner's replaces it or Do, seeing the call
			// fail, returns the zero value.
			st.mu.Lock()
			if !st.closed {
				st.out = v
			}
			st.mu.Unlock()
			return nil
		}
		st.out = v
		return nil
	})
	st.mu.Lock()
	st.closed = true
	out := st.out
	st.mu.Unlock()
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

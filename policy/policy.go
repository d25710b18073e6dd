package policy

import (
	"context"
	"sync/atomic"
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

// Concurrent is an optional interface for a [Policy] that says whether
// its Execute may run fn concurrently with itself (a hedge: see the package
// documentation). [Do] asks it: with a policy whose ConcurrentAttempts
// returns false, Do publishes each attempt's value in turn without looking
// for a [Claimer] in the attempt's context (a lookup that walks the whole
// context chain when there is none); with any other policy, once a
// Claimer exists anywhere in the process, it looks.
type Concurrent interface {
	// ConcurrentAttempts reports whether Execute may call fn for a call
	// while an earlier call of fn for the same call still runs. Its
	// answer must not change over the policy's life: false is a promise
	// that Execute never does, and that fn's context carries no Claimer
	// of this policy's.
	ConcurrentAttempts() bool
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

// claimers is set once a Claimer has been put in a context anywhere in the
// process: until then Do needs no context lookup to know that its attempts
// run one at a time.
var claimers atomic.Bool

// WithClaimer returns a copy of ctx for one attempt of a call whose
// attempts run concurrently, carrying c, the attempt's Claimer: code that
// publishes a result by side effect, as [Do] does, asks [Claim] before it
// publishes. A policy that runs fn concurrently with itself must give each
// attempt such a context and must make the attempt whose Claim returned
// true the call's outcome if it succeeds; an attempt that claimed and then
// failed (a policy below turned its success into an error) must give the
// claim back before another may take it, and the claim of an attempt that
// succeeded is never given back. It panics if ctx or c is nil.
func WithClaimer(ctx context.Context, c Claimer) context.Context {
	if ctx == nil {
		panic("policy: nil Context")
	}
	if c == nil {
		panic("policy: nil Claimer")
	}
	if !claimers.Load() {
		claimers.Store(true)
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
	if c := claimerOf(ctx); c != nil {
		return c.Claim()
	}
	return true
}

// claimerOf returns the Claimer in ctx, or nil: nil at once, without a
// lookup, while no Claimer has been put in a context in this process.
func claimerOf(ctx context.Context) Claimer {
	if !claimers.Load() {
		return nil
	}
	c, _ := ctx.Value(claimerKey{}).(Claimer)
	return c
}

// Do runs fn under p and returns fn's result. On error it returns the zero
// value of T, even if fn returned something else with the error. A value from
// an attempt that failed is never returned: only the value of the attempt
// that succeeded. When p runs attempts concurrently (a hedge), only the
// winning attempt's value is published (see [Claim]): a losing attempt that
// succeeds, before or after Do has returned, publishes nothing. With a
// policy that implements [Concurrent] and says it runs attempts one at a
// time, Do looks for no claim (a Claimer in ctx from a hedge further out is
// not p's, and not Do's to take).
func Do[T any](ctx context.Context, p Policy, fn func(context.Context) (T, error)) (T, error) {
	if p == nil {
		panic("policy: nil Policy")
	}
	if fn == nil {
		panic("policy: nil fn")
	}
	serial := false
	if c, ok := p.(Concurrent); ok {
		serial = !c.ConcurrentAttempts()
	}
	var out T
	err := p.Execute(ctx, func(ctx context.Context) error {
		var c Claimer
		if !serial {
			c = claimerOf(ctx)
		}
		if c == nil {
			// Attempts one at a time, each before Execute returns: a value
			// kept from an earlier attempt must not outlive that attempt's
			// result, whatever a policy makes of the outcome.
			var zero T
			out = zero
		}
		fctx := ctx
		if c != nil {
			// fn sees no claimer: a Do nested in it (a call to another
			// dependency) would otherwise take this attempt's claim for
			// its own success, and a sibling attempt that then succeeds
			// could not publish. One allocation, on hedged attempts only.
			fctx = context.WithValue(ctx, claimerKey{}, nil)
		}
		v, err := fn(fctx)
		if err != nil {
			return err
		}
		// Concurrent attempts: only the one holding the claim writes. A
		// claim is held by one attempt at a time, and given back only by
		// an attempt whose success a policy below then turned into a
		// failure, after its write: the writes are ordered. The policy
		// returns nil only after the holder's write (it learns of the
		// success after fn returned), so out is read below only once it is
		// final; after an error it is not read at all, and a late
		// attempt's write (a claim taken after the call failed) is never
		// seen.
		if c != nil && !c.Claim() {
			return nil
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

package policy

import "context"

// WithoutClaimer returns ctx with no [Claimer] visible: a context for a
// call that runs its own policy (a Transport's Execute, say) from inside an
// attempt of a concurrent call further out. Such a call must not take the
// outer attempt's claim for its own success: the claim is the outer
// call's, given to the outer attempt only once its work succeeds (as [Do]
// hides it from its fn). If ctx carries no Claimer, WithoutClaimer returns
// ctx itself, without allocating; it allocates one context value
// otherwise. It is safe for concurrent use.
func WithoutClaimer(ctx context.Context) context.Context {
	if claimerOf(ctx) == nil {
		return ctx
	}
	return context.WithValue(ctx, claimerKey{}, nil)
}

package ratelimit

import "context"

type costKey struct{}

// WithCost returns ctx carrying the tokens the call made with it draws
// from a Limiter's [Config.TokensPerMinute]. A call that declares no cost
// draws none, but still waits while the bucket is in debt. It panics if
// ctx is nil or tokens is negative.
func WithCost(ctx context.Context, tokens int) context.Context {
	if ctx == nil {
		panic("ratelimit: nil Context")
	}
	if tokens < 0 {
		panic("ratelimit: negative cost")
	}
	return context.WithValue(ctx, costKey{}, tokens)
}

// Cost returns the cost declared in ctx with [WithCost], or 0.
func Cost(ctx context.Context) int {
	n, _ := ctx.Value(costKey{}).(int)
	return n
}

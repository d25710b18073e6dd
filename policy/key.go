package policy

import "context"

type callerKey struct{}

// WithKey returns a copy of ctx that carries key: whom the call is made
// for (a tenant, an API key, a host, a model). A keyed.Group runs the call
// through its key's own policy, and a bulkhead with a fair share serves
// its waiters key by key. Take the key from what the caller proved (an
// authenticated tenant), not from what it claims. The empty key is no
// key. WithKey panics if ctx is nil.
func WithKey(ctx context.Context, key string) context.Context {
	if ctx == nil {
		panic("policy: nil Context")
	}
	return context.WithValue(ctx, callerKey{}, key)
}

// KeyOf returns the key ctx carries ([WithKey]), or "" if it carries none.
func KeyOf(ctx context.Context) string {
	k, _ := ctx.Value(callerKey{}).(string)
	return k
}

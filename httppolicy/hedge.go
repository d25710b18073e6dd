package httppolicy

import (
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// concurrent is policy.Concurrent's method: a policy that says whether its
// Execute may run fn concurrently with itself (a *compose.Pipeline says
// whether a slot holds a hedge).
type concurrent interface {
	ConcurrentAttempts() bool
}

// mayHedge reports whether p may run attempts of one call concurrently: a
// *retry.Hedge may; a policy with a ConcurrentAttempts method says; any
// other policy is assumed to, since nothing says it does not (as policy.Do
// assumes). It decides whether the exchange of a request that may be
// hedged gets an answer clock (see exchange.clocked), which concurrent
// attempts would share.
func mayHedge(p policy.Policy) bool {
	switch p := p.(type) {
	case *retry.Hedge:
		return true
	case holder:
		// A pipeline takes no hedge in a slot.
		return false
	case concurrent:
		return p.ConcurrentAttempts()
	}
	return true
}

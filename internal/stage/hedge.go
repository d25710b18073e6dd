package stage

import (
	"context"

	"github.com/watertight/watertight/policy"
)

// Hedger is the face of a [policy.Policy] that runs the attempts of one
// call concurrently (a hedge, such as retry.Hedge): package compose runs
// each attempt through the slots below it, with its own attempt span and
// timing, instead of handing the policy one closure for everything.
//
// Hedge runs one call as the policy's Execute would, running each attempt
// with attempt(actx, n), n being the attempt's 1-based number and actx a
// context carrying the attempt's [policy.Claimer] (see
// [policy.WithClaimer]); attempts may run concurrently, each on a
// goroutine of the Hedger's, and a losing one may outlive the call. Lost
// reports whether actx, an attempt's context, was canceled because the
// call ended without that attempt (another won, or the call ended
// otherwise): the attempt's error then says nothing about the dependency,
// and compose reports it to the slots below as a cancellation. Lost must be
// cheap and safe to call from the attempt's goroutine.
//
// Hedger is not part of the policy contract: only this module's types can
// implement it, since only they can name [AttemptFunc].
type Hedger interface {
	policy.Policy
	Hedge(ctx context.Context, attempt AttemptFunc) error
	Lost(ctx context.Context) bool
}

// AttemptFunc runs attempt n (1-based) of a call with ctx, the attempt's
// context, and returns its error: what a [Hedger] runs for each attempt.
type AttemptFunc func(ctx context.Context, n int) error

// hedgers are the Hedger adapters registered by the policy packages of this
// module, from their init functions, as [Register]'s are.
var hedgers []func(policy.Policy) Hedger

// RegisterHedger adds an adapter that returns the Hedger face of a policy
// of its package, or nil for any other policy. It must be called only from
// init functions.
func RegisterHedger(adapt func(policy.Policy) Hedger) {
	hedgers = append(hedgers, adapt)
}

// HedgerOf returns the Hedger face of p: p itself if it implements
// Hedger, or the face its package registered, or nil. Package compose calls
// it once per slot, at New, for a policy that [Of] finds neither a Stage
// nor a Repeater.
func HedgerOf(p policy.Policy) Hedger {
	if h, ok := p.(Hedger); ok {
		return h
	}
	for _, adapt := range hedgers {
		if h := adapt(p); h != nil {
			return h
		}
	}
	return nil
}

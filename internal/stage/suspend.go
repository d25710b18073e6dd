package stage

import (
	"context"
	"errors"

	"github.com/watertight/watertight/policy"
)

// ErrSuspend is what fn returns, under [Suspender.ExecuteSuspendable], to
// suspend the call: fn has handed its result over (httppolicy's Transport,
// a response whose body still streams) and the call goes on, with every
// policy that admitted it still holding what it took, until the caller
// resumes it with fn's outcome. Under any other Execute it is an error
// like any other.
var ErrSuspend = errors.New("stage: call suspended")

// Suspender is the face of a policy (a *compose.Pipeline) whose Execute
// can return before the call ends, so that a caller that hands fn's result
// over while the call goes on (httppolicy's Transport, while a response
// body streams) needs no goroutine to hold the call open.
//
// ExecuteSuspendable runs fn.Attempt as Execute runs its fn, on the
// caller's goroutine. If fn returns [ErrSuspend], no policy's exit runs: ExecuteSuspendable
// returns at once, with a nil error and a non-nil [Suspended], and the
// call's outcome is decided by [Suspended.Resume]. Otherwise it returns a
// nil Suspended and the call's error, as Execute would. fn may suspend the
// call only once. The suspended attempt's outcome is still the retry's to
// judge at Resume: if the retry asks for another attempt then, it runs on
// Resume's goroutine, and may not suspend.
//
// Only this module's types implement it: see [SuspenderOf].
type Suspender interface {
	ExecuteSuspendable(ctx context.Context, fn Attempter) (Suspended, error)
}

// Attempter is the fn a [Suspender] runs: an interface rather than a
// policy.Func, so that a caller whose fn is a method of a value it has
// anyway (httppolicy's exchange) passes that value without allocating a
// method value.
type Attempter interface {
	Attempt(ctx context.Context) error
}

// Suspended is a call suspended by [Suspender.ExecuteSuspendable]. Resume
// must be called exactly once, from any goroutine, with the suspended fn's
// outcome in place of [ErrSuspend]: it runs what the policies do after fn
// (a retry's decision, each stage's exit, the pipeline's telemetry),
// innermost first, and returns the call's error. If a policy's exit panics
// (a user hook), the policies outside it still free what they hold, and
// the panic goes on up Resume's caller.
type Suspended interface {
	Resume(err error) error
}

// suspenders are registered by this module's packages (compose) from
// their init functions.
var suspenders []func(policy.Policy) Suspender

// RegisterSuspender adds an adapter that returns the Suspender face of a
// policy of its package, or nil when it has none or cannot suspend (a
// pipeline that may run attempts concurrently, or that wraps a policy in a
// closure). It must be called only from init functions.
func RegisterSuspender(adapt func(policy.Policy) Suspender) {
	suspenders = append(suspenders, adapt)
}

// SuspenderOf returns the Suspender face of p, or nil.
func SuspenderOf(p policy.Policy) Suspender {
	for _, adapt := range suspenders {
		if s := adapt(p); s != nil {
			return s
		}
	}
	return nil
}

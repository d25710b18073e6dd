package stage

import (
	"context"
	"errors"

	"github.com/watertight/watertight/policy"
)

// ErrAborted is what [Stage.Exit] is given in place of fn's error when fn
// panicked or called runtime.Goexit. A Stage counts it as a failure and frees
// what it holds; the panic then goes on up the stack.
var ErrAborted = errors.New("stage: fn panicked or exited its goroutine")

// Token is a Stage's own value for one call, or a Repeater's state between
// attempts: callers pass it through untouched. Values should be
// pointer-shaped (a pointer, a func, nil) so that storing them does not
// allocate. It is a defined type so that only this module's packages can
// declare the methods of [Stage] and [Repeater].
type Token interface{}

// Stage is an optional interface for a [policy.Policy] that acts only before
// and after fn, so that it can run in two phases instead of wrapping a
// closure. Package compose uses it where present.
//
// Enter admits one call. On error fn must not run and Exit must not be
// called; the error is the call's outcome. Otherwise fn runs with the
// returned context, and Exit must then be called exactly once, with that
// context, the token Enter returned, and fn's error (or [ErrAborted] if fn
// panicked or called runtime.Goexit). Exit frees what Enter took and returns
// the error the call ends with. Enter and Exit hold no lock between them.
type Stage interface {
	policy.Policy
	Enter(ctx context.Context) (context.Context, Token, error)
	Exit(ctx context.Context, token Token, err error) error
}

// Run executes fn under s in two phases: it is what a Stage's Execute must
// be equivalent to, and what implementations may simply call. It panics if
// ctx or fn is nil.
func Run(ctx context.Context, s Stage, fn policy.Func) (err error) {
	if ctx == nil {
		panic("stage: nil Context")
	}
	if fn == nil {
		panic("stage: nil fn")
	}
	inner, token, err := s.Enter(ctx)
	if err != nil {
		return err
	}
	// finished stays false if fn panics or calls runtime.Goexit; the deferred
	// Exit then frees the stage's hold while the panic (or Goexit) unwinds.
	// Recovering would be wrong: the panic belongs to the caller.
	finished := false
	defer func() {
		if !finished {
			s.Exit(inner, token, ErrAborted)
		}
	}()
	err = fn(inner)
	finished = true
	return s.Exit(inner, token, err)
}

// Repeater is an optional interface for a [policy.Policy] that may run fn
// more than once, such as retry.Retry. Package compose drives the loop
// itself, with the stages inside it run for each attempt, so no closure is
// allocated per call.
//
// Attempt n (1-based) runs with AttemptContext(ctx, n). After an attempt
// fails with err (never nil), Next decides: it either waits as long as the
// schedule asks and returns again = true with the state to pass to the next
// call of Next, or returns again = false and the error the call ends with.
// state is nil on the first call of Next for a call and is the Repeater's own
// value otherwise.
type Repeater interface {
	policy.Policy
	AttemptContext(ctx context.Context, n int) context.Context
	Next(ctx context.Context, n int, err error, state Token) (again bool, next Token, final error)
}

// Repeat executes fn under r: it is what a Repeater's Execute must be
// equivalent to, and what implementations may simply call. It panics if ctx
// or fn is nil.
func Repeat(ctx context.Context, r Repeater, fn policy.Func) error {
	if ctx == nil {
		panic("stage: nil Context")
	}
	if fn == nil {
		panic("stage: nil fn")
	}
	var state Token
	for n := 1; ; n++ {
		err := fn(r.AttemptContext(ctx, n))
		if err == nil {
			return nil
		}
		again, next, final := r.Next(ctx, n, err, state)
		if !again {
			return final
		}
		state = next
	}
}

// adapters are registered by the policy packages of this module, from their
// init functions (which only append here: no policy runs at init).
var adapters []func(policy.Policy) (Stage, Repeater)

// Register adds an adapter that returns the two-phase face of a policy of
// its package (a Stage or a Repeater), or nils for any other policy. The
// faces are unexported types of the policy's package, so the policies' own
// exported API carries no Enter, Exit or Next method. It must be called
// only from init functions.
func Register(adapt func(policy.Policy) (Stage, Repeater)) {
	adapters = append(adapters, adapt)
}

// Of returns the two-phase face of p: p itself if it implements Repeater or
// Stage (only types of this module can, as only they can name [Token]), or
// the face its package registered, or neither (nils). Package compose calls
// it once per slot, at New.
func Of(p policy.Policy) (Stage, Repeater) {
	if r, ok := p.(Repeater); ok {
		return nil, r
	}
	if s, ok := p.(Stage); ok {
		return s, nil
	}
	for _, adapt := range adapters {
		if s, r := adapt(p); s != nil || r != nil {
			return s, r
		}
	}
	return nil, nil
}

package policy

import "context"

// Stage is an optional interface for a [Policy] that acts only before and
// after fn, so that it can run in two phases instead of wrapping a closure.
// Package compose uses it where present; all built-in policies but retry
// implement it. It also suits any caller whose call outlives a function
// frame, such as a response body read after the round trip returned: Enter
// before, Exit when the body ends.
//
// Enter admits one call. On error fn must not run and Exit must not be
// called; the error is the call's outcome. Otherwise fn runs with the
// returned context, and Exit must then be called exactly once, with that
// context, the token Enter returned, and fn's error (or [ErrAborted] if fn
// panicked or called runtime.Goexit). Exit frees what Enter took and returns
// the error the call ends with. Enter and Exit hold no lock between them.
//
// The token is the Stage's own: callers pass it through untouched. Tokens
// should be pointer-shaped (a pointer, a func, nil) so that storing them in
// an interface does not allocate.
type Stage interface {
	Policy
	Enter(ctx context.Context) (context.Context, any, error)
	Exit(ctx context.Context, token any, err error) error
}

// Run executes fn under s in two phases: it is what a Stage's Execute must
// be equivalent to, and what implementations may simply call. It panics if
// ctx or fn is nil.
func Run(ctx context.Context, s Stage, fn Func) (err error) {
	if ctx == nil {
		panic("policy: nil Context")
	}
	if fn == nil {
		panic("policy: nil fn")
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

// Repeater is an optional interface for a [Policy] that may run fn more than
// once, such as retry.Retry. Package compose drives the loop itself, with
// the stages inside it run for each attempt, so no closure is allocated per
// call.
//
// Attempt n (1-based) runs with AttemptContext(ctx, n). After an attempt
// fails with err (never nil), Next decides: it either waits as long as the
// schedule asks and returns again = true with the state to pass to the next
// call of Next, or returns again = false and the error the call ends with.
// state is nil on the first call of Next for a call and is the Repeater's own
// value otherwise; it should be pointer-shaped so that passing it on does not
// allocate.
type Repeater interface {
	Policy
	AttemptContext(ctx context.Context, n int) context.Context
	Next(ctx context.Context, n int, err error, state any) (again bool, next any, final error)
}

// Repeat executes fn under r: it is what a Repeater's Execute must be
// equivalent to, and what implementations may simply call. It panics if ctx
// or fn is nil.
func Repeat(ctx context.Context, r Repeater, fn Func) error {
	if ctx == nil {
		panic("policy: nil Context")
	}
	if fn == nil {
		panic("policy: nil fn")
	}
	var state any
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

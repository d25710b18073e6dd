package breaker

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"unsafe"

	"github.com/sony/gobreaker/v2"

	"github.com/watertight/watertight/policy"
)

// Execute runs through gobreaker's one-step CircuitBreaker.Execute, which
// allocates nothing, rather than its two-step Allow, whose done closure is
// one 48-byte allocation per call (with the GC work it brings, about a third
// of the cost Execute adds to gobreaker's own). Enter and Exit, which outlive
// a function frame, keep the two-step path. Both must drive the same state
// machine, and gobreaker offers no way to get the one-step face of a
// TwoStepCircuitBreaker: it is its only field, unexported. oneStepOf reads it
// through unsafe, after a check at init that the field is still exactly one
// *CircuitBreaker[struct{}]; if a gobreaker release changes that, Execute
// goes back to the two-step path (policy.Run) and nothing else changes.
//
// gobreaker's Execute recovers a panic in the request, reports it as the
// failure fmt.Errorf("%v", value) and panics again with the same value; it
// reports nothing for runtime.Goexit, which would leave a half-open probe
// taken forever. So the request executeOneStep hands it turns both into a
// panic with an *aborted, whose text gobreaker's error then carries: the
// breaker's IsExcluded and IsSuccessful (classify) recognise that text and
// count the call as a failure (policy.ErrAborted) or, if a state-change
// hook panicked before fn ran, exclude it (errNotRun). executeOneStep then
// recovers the *aborted as it comes out of gobreaker and re-raises what fn
// did: the original panic value, or runtime.Goexit. Every re-raise happens
// inside a deferred call, before the stack unwinds, so the trace of an
// unrecovered panic still shows where fn panicked.

// oneStep is the one-step face of a machine.
type oneStep = gobreaker.CircuitBreaker[struct{}]

// twoStepLayoutOK reports whether a machine is laid out as oneStepOf
// expects: a single field of type *oneStep.
var twoStepLayoutOK = func() bool {
	t := reflect.TypeFor[machine]()
	return t.NumField() == 1 && t.Field(0).Type == reflect.TypeFor[*oneStep]() &&
		t.Size() == unsafe.Sizeof(uintptr(0))
}()

// oneStepOf returns the one-step CircuitBreaker inside m, or nil if the
// layout check failed.
func oneStepOf(m *machine) *oneStep {
	if !twoStepLayoutOK {
		return nil
	}
	return *(**oneStep)(unsafe.Pointer(m))
}

// aborted is the panic value executeOneStep's request raises when fn (or a
// state-change hook before it) panicked or called runtime.Goexit. Its
// Error text is how classify recognises gobreaker's report of it.
type aborted struct {
	value  any  // what fn panicked with; nil for runtime.Goexit
	goexit bool // fn called runtime.Goexit
	notRun bool // a hook panicked before fn could run
}

// Texts of the errors gobreaker builds, with fmt.Errorf("%v", a), from an
// *aborted it recovered. They are unlike any error a caller returns; one
// that did return an error with exactly this text would be counted as a
// panic (a failure) or as not run (excluded).
const (
	abortedText = "breaker: fn panicked or called runtime.Goexit (counted as policy.ErrAborted)"
	notRunText  = "breaker: a state-change hook panicked before fn ran (call excluded)"
)

// Error returns the text classify recognises.
func (a *aborted) Error() string {
	if a.notRun {
		return notRunText
	}
	return abortedText
}

// errorStringType is the type of the errors fmt.Errorf returns without %w
// (errors.New's): the only type whose text classify compares.
var errorStringType = reflect.TypeOf(errors.New(""))

// classify maps gobreaker's report of an *aborted to the outcome the
// two-step path reports for the same event; other errors are unchanged.
func classify(err error) error {
	if err == nil || reflect.TypeOf(err) != errorStringType {
		return err
	}
	switch err.Error() {
	case abortedText:
		return policy.ErrAborted
	case notRunText:
		return errNotRun
	}
	return err
}

// executeOneStep runs fn, admitted by cb, as Execute does through
// policy.Run, without allocating.
func (b *Breaker) executeOneStep(ctx context.Context, cb *oneStep, fn policy.Func) (err error) {
	normal := false
	defer func() {
		if normal {
			return
		}
		// Re-raise what the request did. The *aborted comes back from
		// gobreaker's own recover-and-panic; anything else (a panic in
		// IsFailure, say) goes on as it is.
		r := recover()
		// Report the changes the failure made (the two-step path's
		// deferred Exit does the same) before fn's panic goes on.
		if b.queued.Load() {
			b.flush(ctx)
		}
		a, ok := r.(*aborted)
		switch {
		case !ok:
			if r == nil { // nothing to recover: a Goexit that got here as is
				runtime.Goexit()
			}
			panic(r)
		case a.goexit:
			// Recovering a panic raised during a Goexit resumes the Goexit
			// when this deferred call returns; calling Goexit again says so
			// and ends the goroutine however the runtime treats it.
			runtime.Goexit()
		default:
			panic(a.value)
		}
	}()
	admitted := false
	_, err = cb.Execute(func() (struct{}, error) {
		admitted = true
		ran, finished := false, false
		defer func() {
			if !finished {
				// recover returns nil only for runtime.Goexit (panic(nil)
				// is a *runtime.PanicNilError since Go 1.21).
				v := recover()
				panic(&aborted{value: v, goexit: v == nil, notRun: !ran})
			}
		}()
		if b.queued.Load() {
			b.flush(ctx)
		}
		ran = true
		err := fn(ctx)
		finished = true
		return struct{}{}, err
	})
	normal = true
	if b.queued.Load() {
		b.flush(ctx)
	}
	if !admitted {
		// err is gobreaker's, not fn's (fn may return gobreaker's errors
		// too, from a breaker of its own).
		if err == gobreaker.ErrTooManyRequests {
			return b.reject(ctx, b.rejFull)
		}
		return b.reject(ctx, b.rejOpen)
	}
	return err
}

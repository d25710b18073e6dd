package breaker

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"unsafe"

	"github.com/sony/gobreaker/v2"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// Execute runs through gobreaker's one-step CircuitBreaker.Execute, which
// allocates nothing, rather than its two-step Allow, whose done closure is
// one 48-byte allocation per call: with the GC work it brings, most of what
// Execute added to gobreaker's own cost (64 to 113 ns then, 14 to 39 ns
// since, in benchmark runs on 2-core VMs). Enter and Exit, which outlive
// a function frame, keep the two-step path. Both must drive the same state
// machine, and gobreaker offers no way to get the one-step face of a
// TwoStepCircuitBreaker: it is its only field, unexported. oneStepOf reads it
// through unsafe. oneStepOK, computed once at init, allows that only if
// the field is still exactly one *CircuitBreaker[struct{}], if a throwaway
// gobreaker still recovers, reports and re-raises a panic as described
// below, and if panic(nil) can be told from runtime.Goexit (see
// panicNilIsNil). Otherwise Execute takes the two-step path (policy.Run),
// whose outcomes are the same.
//
// gobreaker's Execute recovers a panic in the request, reports it as the
// failure fmt.Errorf("%v", value) and panics again with the same value; it
// reports nothing for runtime.Goexit, which would leave a half-open probe
// taken forever. So the request executeOneStep hands it turns both into a
// panic with an *aborted, whose text gobreaker's error then carries: the
// breaker's IsExcluded and IsSuccessful (classify) recognise that text and
// count the call as a failure (stage.ErrAborted) or, if a state-change
// hook panicked before fn ran, exclude it (errNotRun). executeOneStep then
// recovers the *aborted as it comes out of gobreaker and re-raises what fn
// did: the original panic value, or runtime.Goexit. Every re-raise happens
// inside a deferred call, before the stack unwinds, so the trace of an
// unrecovered panic still shows where fn panicked (below the breaker's own
// frames, and with the *aborted listed as a recovered panic).
//
// A panic or runtime.Goexit in Config.IsFailure (called inside gobreaker's
// report) is turned into an *aborted too, by callIsFailure, on both paths:
// on the one-step path gobreaker reports it again, as a text classify
// excludes; on the two-step path Exit's reportOutcome excludes the call
// itself. Either way the call is not counted, a half-open probe's place is
// freed, and IsFailure's own panic value (or Goexit) goes on up.

// oneStep is the one-step face of a machine.
type oneStep = gobreaker.CircuitBreaker[struct{}]

// panicNilIsNil reports whether recover returns nil for panic(nil), as it
// does under GODEBUG=panicnil=1 (the default for a main module whose go
// line is older than 1.21); by default it returns a *runtime.PanicNilError.
// Then a deferred call cannot tell panic(nil) from runtime.Goexit, and
// recovering to find out would stop a panic(nil) for good: the one-step path
// and callIsFailure's conversion are off, and the breaker does not recover
// anything.
var panicNilIsNil = func() (isNil bool) {
	defer func() { isNil = recover() == nil }()
	panic(nil) // the point: what recover returns for it
}()

// oneStepOK reports whether oneStepOf may be used: see the top of this file.
var oneStepOK = !panicNilIsNil && twoStepLayoutOK() && oneStepBehaves()

// reraise raises again what an *aborted stands for, from a deferred call:
// runtime.Goexit, or the original panic value.
func (a *aborted) reraise() {
	if a.goexit {
		// Recovering a panic raised during a Goexit resumes the Goexit
		// when the deferred call returns; calling Goexit again says so and
		// ends the goroutine however the runtime treats it.
		runtime.Goexit()
	}
	panic(a.value)
}

// twoStepLayoutOK reports whether a machine is laid out as oneStepOf
// expects: a single field of type *oneStep.
func twoStepLayoutOK() bool {
	t := reflect.TypeFor[machine]()
	return t.NumField() == 1 && t.Field(0).Type == reflect.TypeFor[*oneStep]() &&
		t.Size() == unsafe.Sizeof(uintptr(0))
}

// oneStepBehaves checks, on a throwaway gobreaker, what executeOneStep
// relies on: a panic in the request reaches IsExcluded and IsSuccessful as
// an error classify recognises, and comes out of Execute as the same value.
func oneStepBehaves() (ok bool) {
	var seen []error
	cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		IsExcluded:   func(err error) bool { seen = append(seen, classify(err)); return false },
		IsSuccessful: func(err error) bool { seen = append(seen, classify(err)); return false },
	})
	a := &aborted{}
	defer func() {
		ok = recover() == a && len(seen) == 2 && seen[0] == stage.ErrAborted && seen[1] == stage.ErrAborted
	}()
	cb.Execute(func() (struct{}, error) { panic(a) })
	return false
}

// oneStepOf returns the one-step CircuitBreaker inside m, or nil if
// oneStepOK is false.
func oneStepOf(m *machine) *oneStep {
	if !oneStepOK {
		return nil
	}
	return *(**oneStep)(unsafe.Pointer(m))
}

// aborted is the panic value raised in place of a panic (or
// runtime.Goexit) that gobreaker would otherwise see: from fn, from a
// state-change hook before fn, or from IsFailure. Its Error text is how
// classify recognises gobreaker's report of it.
type aborted struct {
	value  any       // the original panic value; nil for runtime.Goexit
	goexit bool      // fn or a hook called runtime.Goexit
	kind   abortKind // what panicked
}

// abortKind says what an *aborted stands for.
type abortKind int

const (
	fnAborted         abortKind = iota // fn panicked or called Goexit: a failure
	hookBeforeFn                       // a state-change hook, before fn ran: excluded
	isFailurePanicked                  // Config.IsFailure: excluded
)

// Texts of the errors gobreaker builds, with fmt.Errorf("%v", a), from an
// *aborted it recovered. They are unlike any error a caller returns; one
// that did return (or pass to Exit) an error with exactly such a text would
// be counted as a panic (a failure) or excluded.
const (
	abortedText   = "breaker: fn panicked or called runtime.Goexit (counted as stage.ErrAborted)"
	notRunText    = "breaker: a state-change hook panicked before fn ran (call excluded)"
	isFailureText = "breaker: Config.IsFailure panicked (call excluded)"
)

// Error returns the text classify recognises.
func (a *aborted) Error() string {
	switch a.kind {
	case hookBeforeFn:
		return notRunText
	case isFailurePanicked:
		return isFailureText
	}
	return abortedText
}

// errorStringType is the type of the errors fmt.Errorf returns without %w
// (errors.New's): the only type whose text classify compares.
var errorStringType = reflect.TypeOf(errors.New(""))

// classify maps gobreaker's report of an *aborted to the outcome it stands
// for; other errors are unchanged.
func classify(err error) error {
	if err == nil || reflect.TypeOf(err) != errorStringType {
		return err
	}
	switch err.Error() {
	case abortedText:
		return stage.ErrAborted
	case notRunText, isFailureText:
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
		// Re-raise what the request (or IsFailure) did. The *aborted comes
		// back from gobreaker's own recover-and-panic; anything else goes
		// on as it is.
		r := recover()
		a, ok := r.(*aborted)
		// Report the changes the outcome made before the panic goes on, as
		// the two-step path's deferred Exit does; not after a hook's panic,
		// which leaves the rest queued for the next call (as Enter does).
		if (!ok || a.kind != hookBeforeFn) && b.queued.Load() {
			b.flush(ctx)
		}
		if ok {
			a.reraise()
		}
		if r == nil { // nothing to recover: a Goexit that got here as is
			runtime.Goexit()
		}
		panic(r) // not ours (nothing else we call should panic)
	}()
	admitted := false
	_, err = cb.Execute(func() (struct{}, error) {
		admitted = true
		ran, finished := false, false
		defer func() {
			if !finished {
				// recover returns nil only for runtime.Goexit (panic(nil)
				// is a *runtime.PanicNilError: see panicNilIsNil).
				v := recover()
				kind := fnAborted
				if !ran {
					kind = hookBeforeFn
				}
				panic(&aborted{value: v, goexit: v == nil, kind: kind})
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
		return b.rejectRefused(ctx, err)
	}
	return err
}

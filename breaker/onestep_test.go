package breaker

import (
	"context"
	"errors"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/watertight/watertight/policy"
)

// TestOneStepLayout fails when a gobreaker release changes the layout that
// Execute's one-step path reads: Execute still works then (two-step), but
// allocates again.
func TestOneStepLayout(t *testing.T) {
	if !twoStepLayoutOK {
		t.Fatal("gobreaker.TwoStepCircuitBreaker is no longer one *CircuitBreaker field: Execute fell back to the two-step path")
	}
	b := newBreaker(t, Config{})
	if !OneStep(b) {
		t.Fatal("Execute is not on the one-step path")
	}
	// Reset builds a new machine: it must keep the path.
	b.Reset()
	if !OneStep(b) {
		t.Fatal("after Reset, Execute is not on the one-step path")
	}
}

// TestExecuteNoAllocs checks that Execute's success and failure paths
// allocate nothing.
func TestExecuteNoAllocs(t *testing.T) {
	ctx := context.Background()
	b := newBreaker(t, Config{ConsecutiveFailures: 1 << 30, MeterProvider: noop.NewMeterProvider()})
	ok := func(context.Context) error { return nil }
	fail := func(context.Context) error { return errBoom }
	if n := testing.AllocsPerRun(100, func() { b.Execute(ctx, ok) }); n != 0 {
		t.Errorf("Execute, success: %v allocs, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { b.Execute(ctx, fail) }); n != 0 {
		t.Errorf("Execute, failure: %v allocs, want 0", n)
	}
}

// TestFnReturnsGobreakerErrors checks that gobreaker's own errors returned by
// fn (from a breaker of its own) are fn's outcome, not rejections.
func TestFnReturnsGobreakerErrors(t *testing.T) {
	for _, path := range executePaths {
		for _, fnErr := range []error{gobreaker.ErrOpenState, gobreaker.ErrTooManyRequests} {
			t.Run(path+"/"+fnErr.Error(), func(t *testing.T) {
				rejected := 0
				b := newBreakerOn(t, path, Config{ConsecutiveFailures: 2, OnReject: func(context.Context, *policy.RejectedError) { rejected++ }})
				for i := range 2 {
					err, ran := call(b, fnErr)
					if err != fnErr || !ran {
						t.Fatalf("call %d: err %v, ran %v; want fn's error unchanged", i, err, ran)
					}
				}
				if rejected != 0 {
					t.Fatalf("OnReject called %d times", rejected)
				}
				if s := b.State(); s != Open {
					t.Fatalf("after 2 failures: %v, want open", s)
				}
			})
		}
	}
}

// panicHere panics with v; its name must show in the stack where the panic
// is recovered.
//
//go:noinline
func panicHere(v any) { panic(v) }

// TestPanicKeepsItsStack checks that the panic Execute passes on is fn's own
// value, raised again before the stack unwinds, so that whoever recovers it
// (or the crash report) sees where fn panicked.
func TestPanicKeepsItsStack(t *testing.T) {
	for _, path := range executePaths {
		t.Run(path, func(t *testing.T) {
			b := newBreakerOn(t, path, Config{})
			boom := errors.New("user panic")
			var recovered any
			var stack string
			func() {
				defer func() {
					recovered = recover()
					stack = string(debug.Stack())
				}()
				b.Execute(context.Background(), func(context.Context) error {
					panicHere(boom)
					return nil
				})
			}()
			if recovered != boom {
				t.Fatalf("recovered %v (%T), want fn's panic value", recovered, recovered)
			}
			if !strings.Contains(stack, "panicHere") {
				t.Fatalf("the stack where the panic was recovered does not show where fn panicked:\n%s", stack)
			}
		})
	}
}

// TestIsFailurePanics checks that a panic in IsFailure goes up through
// Execute and leaves the breaker usable (gobreaker's lock released). The
// call itself is not counted on the two-step path, and counted as a failure
// on the one-step path (gobreaker reports the panic); the breaker does not
// trip on one failure here.
func TestIsFailurePanics(t *testing.T) {
	for _, path := range executePaths {
		t.Run(path, func(t *testing.T) {
			b := newBreakerOn(t, path, Config{ConsecutiveFailures: 5, IsFailure: func(err error) bool {
				if err == errBoom {
					panic("IsFailure")
				}
				return true
			}})
			var wg sync.WaitGroup
			var recovered any
			wg.Go(func() {
				defer func() { recovered = recover() }()
				call(b, errBoom)
			})
			wg.Wait()
			if recovered != "IsFailure" {
				t.Fatalf("recovered %v, want IsFailure's panic", recovered)
			}
			if err, ran := call(b, nil); err != nil || !ran {
				t.Fatalf("next call: err %v, ran %v", err, ran)
			}
		})
	}
}

// TestAbortedTextIsRecognised checks classify: gobreaker's report of an
// *aborted maps back to the outcome it stands for, and nothing else does.
func TestAbortedTextIsRecognised(t *testing.T) {
	tests := []struct {
		in, want error
	}{
		{nil, nil},
		{errBoom, errBoom},
		{errors.New(abortedText), policy.ErrAborted},
		{errors.New(notRunText), errNotRun},
		{errors.New("breaker: fn panicked"), nil}, // want: unchanged
	}
	for _, tt := range tests {
		want := tt.want
		if want == nil {
			want = tt.in
		}
		if got := classify(tt.in); got != want {
			t.Errorf("classify(%v) = %v, want %v", tt.in, got, want)
		}
	}
	// A wrapped error with the same text is the caller's, not gobreaker's.
	wrapped := wrapErr{errors.New(abortedText)}
	if got := classify(wrapped); got != error(wrapped) {
		t.Errorf("classify(wrapped) = %v, want it unchanged", got)
	}
}

type wrapErr struct{ err error }

func (w wrapErr) Error() string { return w.err.Error() }

package breaker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// TestOneStepLayout fails when a gobreaker release changes the layout that
// Execute's one-step path reads: Execute still works then (two-step), but
// allocates again.
func TestOneStepLayout(t *testing.T) {
	if panicNilIsNil {
		t.Skip("GODEBUG=panicnil=1: the one-step path is off by design")
	}
	if !twoStepLayoutOK() {
		t.Fatal("gobreaker.TwoStepCircuitBreaker is no longer one *CircuitBreaker field: Execute fell back to the two-step path")
	}
	if !oneStepBehaves() {
		t.Fatal("gobreaker's Execute no longer reports and re-raises a panic as executeOneStep expects: Execute fell back to the two-step path")
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

// TestIsFailurePanics checks that a panic or runtime.Goexit in IsFailure
// goes up through Execute as it is, that IsFailure is asked once, and that
// the call is not counted, on both paths: closed, it does not trip a
// breaker on its first failure; half-open, it frees the probe's place.
func TestIsFailurePanics(t *testing.T) {
	for _, path := range executePaths {
		for _, how := range []string{"panic", "goexit"} {
			t.Run(path+"/"+how, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					asked := 0
					b := newBreakerOn(t, path, Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, IsFailure: func(err error) bool {
						if err != errBenign {
							return true
						}
						asked++
						if how == "panic" {
							panic("IsFailure")
						}
						runtime.Goexit()
						return true
					}})
					callAborting := func() {
						t.Helper()
						var wg sync.WaitGroup
						var recovered any
						returned := false
						wg.Go(func() {
							defer func() { recovered = recover() }()
							call(b, errBenign)
							returned = true
						})
						wg.Wait()
						if returned {
							t.Fatal("Execute returned; want IsFailure's panic or Goexit to go on")
						}
						if want := map[string]any{"panic": "IsFailure", "goexit": nil}[how]; recovered != want {
							t.Fatalf("recovered %v, want %v", recovered, want)
						}
					}
					callAborting()
					if asked != 1 {
						t.Fatalf("IsFailure asked %d times, want 1", asked)
					}
					if s := b.State(); s != Closed {
						t.Fatalf("closed, after IsFailure %s: %v, want closed (not counted)", how, s)
					}
					call(b, errBoom)
					time.Sleep(time.Second)
					callAborting()
					if s := b.State(); s != HalfOpen {
						t.Fatalf("half-open, after IsFailure %s: %v, want half-open", how, s)
					}
					if err, ran := call(b, nil); err != nil || !ran {
						t.Fatalf("next probe: err %v, ran %v; want its place freed", err, ran)
					}
					if s := b.State(); s != Closed {
						t.Fatalf("after a good probe: %v, want closed", s)
					}
				})
			})
		}
	}
}

// TestHookPanicBeforeFn checks that when a state-change hook reported before
// fn panics (after forcing the breaker open, so that another change is
// queued), both paths pass on that panic, do not run fn, and leave the later
// change to the next call.
func TestHookPanicBeforeFn(t *testing.T) {
	for _, path := range executePaths {
		t.Run(path, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log hookLog
				var b *Breaker
				n := 0
				b = newBreakerOn(t, path, Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, OnStateChange: func(from, to State) {
					log.hook(from, to)
					if to == HalfOpen || (from == HalfOpen && to == Open) {
						if to == HalfOpen {
							b.ForceOpen()
						}
						n++
						panic(fmt.Sprint("hook", n))
					}
				}})
				call(b, errBoom)
				time.Sleep(2 * time.Second)
				var wg sync.WaitGroup
				var recovered any
				ran := false
				wg.Go(func() {
					defer func() { recovered = recover() }()
					b.Execute(context.Background(), func(context.Context) error { ran = true; return nil })
				})
				wg.Wait()
				if recovered != "hook1" || ran {
					t.Fatalf("recovered %v, fn ran %v; want the first hook's panic and fn not run", recovered, ran)
				}
				if got, want := log.list(), []string{"closed->open", "open->half-open"}; !slices.Equal(got, want) {
					t.Fatalf("transitions = %v, want %v (the rest left queued)", got, want)
				}
			})
		})
	}
}

// TestPanicNilMode runs TestPanicNilModeChild in a child process under
// GODEBUG=panicnil=1, where recover returns nil for panic(nil).
func TestPanicNilMode(t *testing.T) {
	if os.Getenv("WATERTIGHT_PANICNIL_CHILD") != "" {
		t.Skip("in the child")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPanicNilModeChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "GODEBUG=panicnil=1", "WATERTIGHT_PANICNIL_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestPanicNilModeChild") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestPanicNilModeChild checks, under GODEBUG=panicnil=1, that Execute
// takes the two-step path and that a panic(nil) in fn is not turned into a
// runtime.Goexit: the caller recovers it and goes on.
func TestPanicNilModeChild(t *testing.T) {
	if os.Getenv("WATERTIGHT_PANICNIL_CHILD") == "" {
		t.Skip("run by TestPanicNilMode")
	}
	if !panicNilIsNil {
		t.Fatal("GODEBUG=panicnil=1 not seen")
	}
	b := newBreaker(t, Config{ConsecutiveFailures: 1})
	if OneStep(b) {
		t.Fatal("Execute is on the one-step path")
	}
	var wg sync.WaitGroup
	wentOn := false
	wg.Go(func() {
		func() {
			defer func() { recover() }()
			b.Execute(context.Background(), func(context.Context) error { panic(nil) })
		}()
		wentOn = true
	})
	wg.Wait()
	if !wentOn {
		t.Fatal("the caller could not recover panic(nil): it became a Goexit")
	}
	if s := b.State(); s != Open {
		t.Fatalf("after fn panicked: %v, want open (a failure)", s)
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
		{errors.New(abortedText), stage.ErrAborted},
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

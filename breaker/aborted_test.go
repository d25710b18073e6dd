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

	"github.com/watertight/watertight/policy"
)

// raceEnabled is set under -race, where allocation counts differ.
var raceEnabled bool

// TestExecuteAllocs checks what the package doc says Execute costs: one
// allocation (gobreaker's done func) on the success and failure paths,
// none on a rejection.
func TestExecuteAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	ctx := context.Background()
	b := newBreaker(t, Config{ConsecutiveFailures: 1 << 30, MeterProvider: noop.NewMeterProvider()})
	ok := func(context.Context) error { return nil }
	fail := func(context.Context) error { return errBoom }
	if n := testing.AllocsPerRun(100, func() { b.Execute(ctx, ok) }); n > 1 {
		t.Errorf("Execute, success: %v allocs, want at most 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { b.Execute(ctx, fail) }); n > 1 {
		t.Errorf("Execute, failure: %v allocs, want at most 1", n)
	}
	b.ForceOpen()
	if n := testing.AllocsPerRun(100, func() { b.Execute(ctx, ok) }); n != 0 {
		t.Errorf("Execute, rejected: %v allocs, want 0", n)
	}
}

// TestFnReturnsGobreakerErrors checks that gobreaker's own errors returned by
// fn (from a breaker of its own) are fn's outcome, not rejections.
func TestFnReturnsGobreakerErrors(t *testing.T) {
	for _, fnErr := range []error{gobreaker.ErrOpenState, gobreaker.ErrTooManyRequests} {
		t.Run(fnErr.Error(), func(t *testing.T) {
			rejected := 0
			b := newBreaker(t, Config{ConsecutiveFailures: 2, OnReject: func(context.Context, *policy.RejectedError) { rejected++ }})
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

// panicHere panics with v; its name must show in the stack where the panic
// is recovered.
//
//go:noinline
func panicHere(v any) { panic(v) }

// TestPanicKeepsItsStack checks that the panic Execute passes on is fn's own
// value, never recovered on the way, so that whoever recovers it (or the
// crash report) sees where fn panicked.
func TestPanicKeepsItsStack(t *testing.T) {
	b := newBreaker(t, Config{})
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
}

// runAborting runs f on a goroutine of its own, recovering what it
// raises, and reports whether f returned, whether the goroutine went on
// after the recovering call (false: runtime.Goexit), and what recover
// returned. It tells a stopped panic from a Goexit by where the goroutine
// got to, not by recover's value, which is nil for panic(nil) under
// GODEBUG=panicnil=1.
func runAborting(f func()) (returned, wentOn bool, recovered any) {
	var wg sync.WaitGroup
	wg.Go(func() {
		func() {
			defer func() { recovered = recover() }()
			f()
			returned = true
		}()
		wentOn = true
	})
	wg.Wait()
	return returned, wentOn, recovered
}

// TestIsFailurePanics checks that a panic or runtime.Goexit in IsFailure
// goes up through Execute as it is, that IsFailure is asked once, and that
// the call is not counted: closed, it does not trip a breaker on its first
// failure; half-open, it frees the probe's place.
func TestIsFailurePanics(t *testing.T) {
	for _, how := range []string{"panic", "panic(nil)", "goexit"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				asked := 0
				b := newBreaker(t, Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, IsFailure: func(err error) bool {
					if err != errBenign {
						return true
					}
					asked++
					switch how {
					case "panic":
						panic("IsFailure")
					case "panic(nil)":
						panic(nil)
					}
					runtime.Goexit()
					return true
				}})
				callAborting := func() {
					t.Helper()
					returned, wentOn, recovered := runAborting(func() { call(b, errBenign) })
					if returned {
						t.Fatal("Execute returned; want IsFailure's panic or Goexit to go on")
					}
					if wentOn != (how != "goexit") {
						t.Fatalf("the caller went on after recovering: %v; want %v", wentOn, how != "goexit")
					}
					if how == "panic" && recovered != "IsFailure" {
						t.Fatalf("recovered %v, want IsFailure's panic", recovered)
					}
				}
				callAborting()
				if asked != 1 {
					t.Fatalf("IsFailure asked %d times, want 1", asked)
				}
				if s := b.State(); s != Closed {
					t.Fatalf("closed, after IsFailure %s: %v, want closed (not counted)", how, s)
				}
				if c := b.Counts(); c != (Counts{Requests: 1, TotalExclusions: 1}) {
					t.Fatalf("closed, after IsFailure %s: %+v, want the call excluded", how, c)
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

// TestPanicNil checks that a panic(nil) in fn is passed on as a panic, not
// turned into a runtime.Goexit or swallowed (the caller recovers it and
// goes on), and that it counts as a failure; TestPanicNilMode runs it again
// under GODEBUG=panicnil=1.
func TestPanicNil(t *testing.T) {
	if os.Getenv(panicNilChild) != "" {
		// Make sure the mode is on: recover returns nil for panic(nil).
		var r any = "not run"
		func() {
			defer func() { r = recover() }()
			panic(nil)
		}()
		if r != nil {
			t.Fatalf("GODEBUG=panicnil=1 not in effect: recover returned %T", r)
		}
	}
	var log hookLog
	b := newBreaker(t, Config{ConsecutiveFailures: 1, OnStateChange: log.hook})
	returned, wentOn, recovered := runAborting(func() {
		b.Execute(context.Background(), func(context.Context) error { panic(nil) })
	})
	if returned || !wentOn {
		t.Fatalf("Execute returned %v, the caller went on %v; want the panic passed on and stopped by the caller", returned, wentOn)
	}
	if _, ok := recovered.(*runtime.PanicNilError); !ok && recovered != nil {
		t.Fatalf("recovered %v (%T), want panic(nil)'s value", recovered, recovered)
	}
	if s := b.State(); s != Open {
		t.Fatalf("after fn's panic(nil): %v, want open (a failure)", s)
	}
	if got, want := log.list(), []string{"closed->open"}; !slices.Equal(got, want) {
		t.Fatalf("transitions = %v, want %v", got, want)
	}
}

// panicNilChild is set in the environment of TestPanicNilMode's child.
const panicNilChild = "WATERTIGHT_PANICNIL_CHILD"

// panicNilTests are the tests of panics and Goexits that TestPanicNilMode
// runs again under GODEBUG=panicnil=1.
var panicNilTests = []string{
	"TestPanicNil", "TestPanicKeepsItsStack", "TestIsFailurePanics", "TestHookPanicBeforeFn",
	"TestAbortedProbeDoesNotWedge", "TestPanickingHook",
}

// TestPanicNilMode runs panicNilTests in a child process under
// GODEBUG=panicnil=1, where recover returns nil for panic(nil) as for
// runtime.Goexit: the outcomes must not depend on it.
func TestPanicNilMode(t *testing.T) {
	if os.Getenv(panicNilChild) != "" {
		t.Skip("in the child")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^("+strings.Join(panicNilTests, "|")+")$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "GODEBUG=panicnil=1", panicNilChild+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, name := range panicNilTests {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("child: %s did not pass\n%s", name, out)
		}
	}
}

// TestHookPanicBeforeFn checks that when a state-change hook reported before
// fn panics (after forcing the breaker open, so that another change is
// queued), Execute passes on that panic, does not run fn, and leaves the
// later change to the next call.
func TestHookPanicBeforeFn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log hookLog
		var b *Breaker
		n := 0
		b = newBreaker(t, Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, OnStateChange: func(from, to State) {
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
}

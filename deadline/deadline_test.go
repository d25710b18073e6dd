package deadline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

var (
	errBoom  = errors.New("boom")
	errCause = errors.New("caller gave up")
)

type ctxKey struct{}

// hiddenDeadline is a context that ends by a deadline it does not report,
// as some context implementations do.
type hiddenDeadline struct{ context.Context }

func (hiddenDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }

func TestNewValidation(t *testing.T) {
	tests := []struct {
		timeout time.Duration
		want    string
	}{
		{0, "deadline: Config.Timeout must be > 0, got 0s"},
		{-time.Nanosecond, "deadline: Config.Timeout must be > 0, got -1ns"},
		{-time.Hour, "deadline: Config.Timeout must be > 0, got -1h0m0s"},
		{math.MinInt64, "deadline: Config.Timeout must be > 0, got -2562047h47m16.854775808s"},
	}
	for _, tt := range tests {
		t.Run(tt.timeout.String(), func(t *testing.T) {
			d, err := New(Config{Name: "x", Timeout: tt.timeout})
			if d != nil {
				t.Errorf("New returned a Deadline %+v for an invalid Config", d)
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("New error = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestNewValid(t *testing.T) {
	for _, timeout := range []time.Duration{time.Nanosecond, 2 * time.Second, math.MaxInt64} {
		d, err := New(Config{Timeout: timeout}) // nil MeterProvider: the global one
		if err != nil {
			t.Fatalf("New(Timeout: %v): %v", timeout, err)
		}
		if got := d.Timeout(); got != timeout {
			t.Errorf("Timeout() = %v, want %v", got, timeout)
		}
	}
}

func TestNilPanics(t *testing.T) {
	d := mustNew(t, Config{Timeout: time.Second})
	var nilCtx context.Context
	ok := func(context.Context) error { return nil }
	tests := []struct {
		name string
		call func()
		want string
	}{
		{"Execute nil ctx", func() { d.Execute(nilCtx, ok) }, "deadline: nil Context"},
		{"Execute nil fn", func() { d.Execute(context.Background(), nil) }, "deadline: nil fn"},
		{"Start nil ctx", func() { d.Start(nilCtx) }, "deadline: nil Context"},
		{"zero Deadline nil ctx", func() { new(Deadline).Execute(nilCtx, ok) }, "deadline: nil Context"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if got := recover(); got != tt.want {
					t.Errorf("panic = %v, want %q", got, tt.want)
				}
			}()
			tt.call()
		})
	}
}

func TestErrExceededSentinel(t *testing.T) {
	if !errors.Is(ErrExceeded, context.DeadlineExceeded) {
		t.Error("ErrExceeded does not match context.DeadlineExceeded")
	}
	if errors.Is(ErrExceeded, policy.ErrRejected) {
		t.Error("ErrExceeded matches policy.ErrRejected: a timeout is not a rejection")
	}
	if got, want := ErrExceeded.Error(), "deadline: timeout exceeded"; got != want {
		t.Errorf("ErrExceeded = %q, want %q", got, want)
	}
	if got := telemetry.ErrorType(ErrExceeded); got != telemetry.TypeTimeout {
		t.Errorf("ErrorType(ErrExceeded) = %q, want %q", got, telemetry.TypeTimeout)
	}
	var zero ExceededError
	if got, want := zero.Error(), "deadline: 0s timeout exceeded"; got != want {
		t.Errorf("zero ExceededError = %q, want %q", got, want)
	}
}

// runner is one way to run fn under d: Execute, or Start and Stop, which
// Execute must match.
type runner struct {
	name string
	run  func(d *Deadline, ctx context.Context, fn policy.Func) error
}

var runners = []runner{
	{"Execute", func(d *Deadline, ctx context.Context, fn policy.Func) error { return d.Execute(ctx, fn) }},
	{"Start+Stop", func(d *Deadline, ctx context.Context, fn policy.Func) error {
		inner, t := d.Start(ctx)
		return t.Stop(fn(inner))
	}},
}

// TestOutcomes covers the outcomes table of the package documentation, with
// Timeout = 2s on the fake clock.
func TestOutcomes(t *testing.T) {
	const timeout = 2 * time.Second
	waitDone := func(ctx context.Context) error {
		<-ctx.Done()
		return fmt.Errorf("fetch: %w", ctx.Err())
	}
	sleepThen := func(d time.Duration, err error) policy.Func {
		return func(context.Context) error {
			time.Sleep(d)
			return err
		}
	}
	background := func(t *testing.T) context.Context { return context.Background() }
	withTimeout := func(d time.Duration) func(t *testing.T) context.Context {
		return func(t *testing.T) context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			t.Cleanup(cancel)
			return ctx
		}
	}
	cancelAfter := func(d time.Duration, cause error) func(t *testing.T) context.Context {
		return func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancelCause(context.Background())
			if d == 0 {
				cancel(cause)
			} else {
				time.AfterFunc(d, func() { cancel(cause) })
			}
			t.Cleanup(func() { cancel(nil) })
			return ctx
		}
	}

	tests := []struct {
		name   string
		parent func(t *testing.T) context.Context
		fn     policy.Func
		// exceeded: the result must be an *ExceededError wrapping fn's
		// error; otherwise fn's error itself. Either way it matches want.
		exceeded    bool
		want        error
		wantElapsed time.Duration
		wantParent  bool // fn runs with the caller's ctx itself: no timer
	}{
		{"fn succeeds in time", background, sleepThen(time.Second, nil), false, nil, time.Second, false},
		{"fn fails in time", background, sleepThen(time.Second, errBoom), false, errBoom, time.Second, false},
		{"fn waits for ctx", background, waitDone, true, context.DeadlineExceeded, timeout, false},
		{"fn ignores ctx, returns nil late", background, sleepThen(5*time.Second, nil), false, nil, 5 * time.Second, false},
		{"fn ignores ctx, fails late", background, sleepThen(5*time.Second, errBoom), true, errBoom, 5 * time.Second, false},
		{"parent canceled", cancelAfter(time.Second, nil), waitDone, false, context.Canceled, time.Second, false},
		{"parent canceled with cause", cancelAfter(time.Second, errCause),
			func(ctx context.Context) error { <-ctx.Done(); return context.Cause(ctx) }, false, errCause, time.Second, false},
		{"parent canceled before the call", cancelAfter(0, nil),
			func(ctx context.Context) error { return ctx.Err() }, false, context.Canceled, 0, false},
		{"parent canceled after ours fired", cancelAfter(timeout+time.Second, nil),
			func(ctx context.Context) error { <-ctx.Done(); time.Sleep(2 * time.Second); return ctx.Err() },
			true, context.DeadlineExceeded, timeout + 2*time.Second, false},
		// The caller's deadline, hidden from Deadline(), fires first: the
		// call's ctx ends with DeadlineExceeded, but not by our timer.
		{"parent deadline hidden", func(t *testing.T) context.Context { return hiddenDeadline{withTimeout(time.Second)(t)} },
			waitDone, false, context.DeadlineExceeded, time.Second, false},
		{"parent deadline sooner", withTimeout(time.Second), waitDone, false, context.DeadlineExceeded, time.Second, true},
		{"parent deadline equal", withTimeout(timeout), waitDone, false, context.DeadlineExceeded, timeout, true},
		{"parent deadline later", withTimeout(timeout + time.Nanosecond), waitDone, true, context.DeadlineExceeded, timeout, false},
	}
	for _, r := range runners {
		for _, tt := range tests {
			t.Run(r.name+"/"+tt.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					mp, reader := newMeter(t)
					var hooks atomic.Int32
					d := mustNew(t, Config{Name: "api", Timeout: timeout, MeterProvider: mp,
						OnTimeout: func(context.Context, time.Duration) { hooks.Add(1) }})
					parent := tt.parent(t)
					var seen context.Context
					var fnErr error
					start := time.Now()
					err := r.run(d, parent, func(ctx context.Context) error {
						seen = ctx
						fnErr = tt.fn(ctx)
						return fnErr
					})
					if elapsed := time.Since(start); elapsed != tt.wantElapsed {
						t.Errorf("elapsed = %v, want %v", elapsed, tt.wantElapsed)
					}
					if (seen == parent) != tt.wantParent {
						t.Errorf("fn's ctx is the caller's: %v, want %v", seen == parent, tt.wantParent)
					}
					if seen != parent && seen.Err() == nil {
						t.Error("fn's ctx is not done after the call: the timer was not released")
					}
					var wantTimeouts int64
					if tt.exceeded {
						wantTimeouts = 1
						var ee *ExceededError
						if !errors.As(err, &ee) {
							t.Fatalf("err = %v (%T), want an *ExceededError", err, err)
						}
						if ee.Err != fnErr || !errors.Is(err, tt.want) || !errors.Is(err, ErrExceeded) {
							t.Errorf("err = %v, want an ExceededError wrapping fn's error %v", err, fnErr)
						}
						if context.Cause(seen) != d.Cause() {
							t.Errorf("Cause(fn's ctx) = %v, want the Deadline's cause", context.Cause(seen))
						}
					} else {
						if err != fnErr || !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
							t.Errorf("err = %v, want fn's error %v unchanged, matching %v", err, fnErr, tt.want)
						}
						if errors.Is(err, ErrExceeded) {
							t.Errorf("err = %v matches ErrExceeded", err)
						}
					}
					if errors.Is(err, policy.ErrRejected) {
						t.Errorf("err = %v matches policy.ErrRejected: a timeout is not a rejection", err)
					}
					if got := collect(t, reader, telemetry.MetricTimeouts)["api"]; got != wantTimeouts {
						t.Errorf("watertight.timeouts = %d, want %d", got, wantTimeouts)
					}
					if got := int64(hooks.Load()); got != wantTimeouts {
						t.Errorf("OnTimeout called %d times, want %d", got, wantTimeouts)
					}
				})
			})
		}
	}
}

func TestExceededError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := mustNew(t, Config{Name: "search", Timeout: 2 * time.Second})
		err := d.Execute(context.Background(), func(ctx context.Context) error {
			<-ctx.Done()
			return fmt.Errorf("%w: %w", errBoom, ctx.Err())
		})
		if got, want := err.Error(), `deadline "search": 2s timeout exceeded: boom: context deadline exceeded`; got != want {
			t.Errorf("Error() = %q, want %q", got, want)
		}
		for _, target := range []error{ErrExceeded, context.DeadlineExceeded, errBoom} {
			if !errors.Is(err, target) {
				t.Errorf("errors.Is(err, %v) = false", target)
			}
		}
		if errors.Is(err, policy.ErrRejected) {
			t.Error("err matches policy.ErrRejected")
		}
		var ee *ExceededError
		if !errors.As(err, &ee) || ee.Name != "search" || ee.Duration != 2*time.Second {
			t.Fatalf("errors.As: %+v", ee)
		}
		if got := ee.ErrorType(); got != telemetry.TypeTimeout {
			t.Errorf("ErrorType() = %q, want %q", got, telemetry.TypeTimeout)
		}
		if got := telemetry.ErrorType(err); got != telemetry.TypeTimeout {
			t.Errorf("telemetry.ErrorType(err) = %q, want %q", got, telemetry.TypeTimeout)
		}
		var to interface{ Timeout() bool }
		if !errors.As(err, &to) || !to.Timeout() {
			t.Error("err has no Timeout() bool returning true")
		}

		// Unnamed: no quoted name.
		d = mustNew(t, Config{Timeout: time.Millisecond})
		err = d.Execute(context.Background(), func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		if got, want := err.Error(), "deadline: 1ms timeout exceeded: context deadline exceeded"; got != want {
			t.Errorf("Error() = %q, want %q", got, want)
		}
	})
}

// TestCooperative checks that fn runs on the caller's goroutine with a ctx
// done exactly Timeout after the call started, and that Execute waits for
// fn however late it returns.
func TestCooperative(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := mustNew(t, Config{Timeout: 3 * time.Second})
		parent := context.WithValue(context.Background(), ctxKey{}, "v")
		start := time.Now()
		var returned atomic.Bool
		err := d.Execute(parent, func(ctx context.Context) error {
			if got, ok := ctx.Deadline(); !ok || !got.Equal(start.Add(3*time.Second)) {
				t.Errorf("fn's Deadline() = %v, %v; want %v", got, ok, start.Add(3*time.Second))
			}
			if ctx.Value(ctxKey{}) != "v" {
				t.Error("fn's ctx lost the caller's values")
			}
			<-ctx.Done()
			time.Sleep(time.Hour) // fn winds down slowly: Execute must wait
			returned.Store(true)
			return ctx.Err()
		})
		if !returned.Load() {
			t.Error("Execute returned before fn")
		}
		if got := time.Since(start); got != 3*time.Second+time.Hour {
			t.Errorf("Execute returned after %v, want %v", got, 3*time.Second+time.Hour)
		}
		if !errors.Is(err, ErrExceeded) {
			t.Errorf("err = %v, want ErrExceeded", err)
		}
	})
}

func TestStartSetsATimerOnlyBeforeTheCallersDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := mustNew(t, Config{Timeout: 2 * time.Second})

		ctx, timer := d.Start(context.Background())
		if _, ok := ctx.Deadline(); !ok {
			t.Fatal("Start set no deadline")
		}
		if got := timer.Stop(nil); got != nil || ctx.Err() != context.Canceled {
			t.Errorf("Stop = %v, ctx.Err() = %v; want nil, context.Canceled", got, ctx.Err())
		}

		for _, parentTimeout := range []time.Duration{time.Second, 2 * time.Second} {
			parent, cancel := context.WithTimeout(context.Background(), parentTimeout)
			ctx, timer := d.Start(parent)
			if ctx != parent {
				t.Errorf("parent deadline in %v: Start returned a new context; want the parent itself", parentTimeout)
			}
			if got := timer.Stop(errBoom); got != errBoom {
				t.Errorf("Stop of an unset timer = %v, want errBoom unchanged", got)
			}
			cancel()
		}

		ctx, timer = d.Start(context.Background())
		<-ctx.Done()
		var ex *ExceededError
		if got := timer.Stop(ctx.Err()); !errors.As(got, &ex) {
			t.Errorf("Stop after the timer fired = %v; want an *ExceededError", got)
		}
	})
}

func TestExitAborted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp, reader := newMeter(t)
		var hooks atomic.Int32
		d := mustNew(t, Config{Name: "api", Timeout: time.Second, MeterProvider: mp,
			OnTimeout: func(context.Context, time.Duration) { hooks.Add(1) }})
		_, timer := d.Start(context.Background())
		time.Sleep(2 * time.Second) // our timer fires
		if got := timer.Stop(policy.ErrAborted); got != policy.ErrAborted {
			t.Errorf("Stop(ErrAborted) = %v, want policy.ErrAborted", got)
		}
		if got := collect(t, reader, telemetry.MetricTimeouts)["api"]; got != 0 || hooks.Load() != 0 {
			t.Errorf("aborted call counted as a timeout: counter %d, hooks %d", got, hooks.Load())
		}
	})
}

func TestPanicReleasesTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp, reader := newMeter(t)
		var hooks atomic.Int32
		d := mustNew(t, Config{Name: "api", Timeout: time.Second, MeterProvider: mp,
			OnTimeout: func(context.Context, time.Duration) { hooks.Add(1) }})
		tests := []struct {
			name    string
			waitFor bool // fn panics after our timer fired
		}{
			{"before the timeout", false},
			{"after the timeout", true},
		}
		for _, tt := range tests {
			var seen context.Context
			func() {
				defer func() {
					if got := recover(); got != "fn panic" {
						t.Errorf("%s: recovered %v, want the panic of fn", tt.name, got)
					}
				}()
				d.Execute(context.Background(), func(ctx context.Context) error {
					seen = ctx
					if tt.waitFor {
						<-ctx.Done()
					}
					panic("fn panic")
				})
			}()
			if seen == nil || seen.Err() == nil {
				t.Errorf("%s: fn's ctx not done after the panic: the timer leaked", tt.name)
			}
		}
		if got := collect(t, reader, telemetry.MetricTimeouts)["api"]; got != 0 || hooks.Load() != 0 {
			t.Errorf("panic counted as a timeout: counter %d, hooks %d", got, hooks.Load())
		}

		// runtime.Goexit (t.FailNow in fn) releases the timer too.
		var seen context.Context
		done := make(chan struct{})
		go func() {
			defer close(done)
			d.Execute(context.Background(), func(ctx context.Context) error {
				seen = ctx
				runtime.Goexit()
				return nil
			})
		}()
		<-done
		if seen == nil || seen.Err() != context.Canceled {
			t.Errorf("after Goexit, fn's ctx.Err() = %v, want context.Canceled", seen.Err())
		}
	})
}

func TestHugeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		fits := time.Duration(math.MaxInt64 - now.UnixNano()) // now + fits is the last representable instant
		tests := []struct {
			name      string
			timeout   time.Duration
			wantTimer bool
		}{
			{"MaxInt64", math.MaxInt64, false},
			{"one past the limit", fits + 1, false},
			{"at the limit", fits, true},
			{"100 years", 100 * 365 * 24 * time.Hour, true},
		}
		for _, tt := range tests {
			d := mustNew(t, Config{Timeout: tt.timeout})
			parent := context.Background()
			ctx, timer := d.Start(parent)
			if gotTimer := ctx != parent; gotTimer != tt.wantTimer || (ctx != parent) != tt.wantTimer {
				t.Errorf("%s: timer set %v (ctx is parent %v), want %v", tt.name, gotTimer, ctx == parent, tt.wantTimer)
			}
			if tt.wantTimer {
				if dl, ok := ctx.Deadline(); !ok || !dl.Equal(now.Add(tt.timeout)) || ctx.Err() != nil {
					t.Errorf("%s: Deadline() = %v, %v (err %v); want %v, not done", tt.name, dl, ok, ctx.Err(), now.Add(tt.timeout))
				}
			}
			if got := timer.Stop(nil); got != nil {
				t.Errorf("%s: Stop = %v, want nil", tt.name, got)
			}
			if got := d.Execute(parent, func(ctx context.Context) error { return ctx.Err() }); got != nil {
				t.Errorf("%s: Execute = %v, want nil (fn's ctx not done)", tt.name, got)
			}
		}
	})
}

func TestZeroDeadline(t *testing.T) {
	var d Deadline
	parent := context.Background()
	err := d.Execute(parent, func(ctx context.Context) error {
		if ctx != parent {
			t.Error("zero Deadline: fn's ctx is not the caller's")
		}
		return errBoom
	})
	if err != errBoom || d.Timeout() != 0 {
		t.Errorf("zero Deadline: Execute = %v, Timeout() = %v; want errBoom, 0", err, d.Timeout())
	}
}

func TestTelemetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp, reader := newMeter(t)
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		defer func() {
			if err := tp.Shutdown(context.Background()); err != nil {
				t.Errorf("TracerProvider.Shutdown: %v", err)
			}
		}()
		d := mustNew(t, Config{Name: "api", Timeout: time.Second, MeterProvider: mp})
		other := mustNew(t, Config{Name: "other", Timeout: time.Second, MeterProvider: mp})

		ctx, span := tp.Tracer("test").Start(context.Background(), "call")
		wait := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
		if err := d.Execute(ctx, wait); !errors.Is(err, ErrExceeded) {
			t.Errorf("err = %v, want ErrExceeded", err)
		}
		// Neither a success, a late nil, nor a caller's cancellation counts.
		d.Execute(ctx, func(context.Context) error { return nil })
		d.Execute(ctx, func(context.Context) error { time.Sleep(2 * time.Second); return nil })
		canceled, cancel := context.WithCancel(ctx)
		time.AfterFunc(time.Millisecond, cancel)
		d.Execute(canceled, wait)
		span.End()

		if got := collect(t, reader, telemetry.MetricTimeouts); len(got) != 1 || got["api"] != 1 {
			t.Errorf("watertight.timeouts = %v, want exactly {api: 1}", got)
		}
		if got := collect(t, reader, telemetry.MetricRejections); len(got) != 0 {
			t.Errorf("watertight.rejections = %v, want none: a timeout is not a rejection", got)
		}
		other.Execute(context.Background(), wait) // no span in ctx: counted, no event
		if got := collect(t, reader, telemetry.MetricTimeouts); len(got) != 2 || got["api"] != 1 || got["other"] != 1 {
			t.Errorf("watertight.timeouts = %v, want {api: 1, other: 1}", got)
		}

		spans := sr.Ended()
		if len(spans) != 1 {
			t.Fatalf("%d spans ended, want only the caller's: a Deadline starts none", len(spans))
		}
		events := spans[0].Events()
		if len(events) != 1 || events[0].Name != telemetry.EventTimeout {
			t.Fatalf("span events = %+v, want one %s", events, telemetry.EventTimeout)
		}
		want := attribute.NewSet(telemetry.KeyKind.String("deadline"), telemetry.KeyName.String("api"))
		if got := attribute.NewSet(events[0].Attributes...); !got.Equals(&want) {
			t.Errorf("event attributes = %v, want %v", got.ToSlice(), want.ToSlice())
		}
	})
}

func TestOnTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp, reader := newMeter(t)
		var calls atomic.Int32
		d := mustNew(t, Config{Name: "api", Timeout: 2 * time.Second, MeterProvider: mp,
			OnTimeout: func(ctx context.Context, timeout time.Duration) {
				calls.Add(1)
				if timeout != 2*time.Second {
					t.Errorf("OnTimeout timeout = %v, want 2s", timeout)
				}
				if ctx.Value(ctxKey{}) != "v" || ctx.Err() != context.DeadlineExceeded {
					t.Errorf("OnTimeout ctx: value %v, err %v; want the call's ctx, done", ctx.Value(ctxKey{}), ctx.Err())
				}
				if got := collect(t, reader, telemetry.MetricTimeouts)["api"]; got != 1 {
					t.Errorf("OnTimeout ran before the timeout was counted (counter %d)", got)
				}
			}})
		parent := context.WithValue(context.Background(), ctxKey{}, "v")
		d.Execute(parent, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		if got := calls.Load(); got != 1 {
			t.Errorf("OnTimeout called %d times, want 1", got)
		}
	})
}

// TestNested checks that, with two Deadlines nested as compose nests a
// whole-call deadline and an attempt timeout, only the one whose timer fired
// reports it, once.
func TestNested(t *testing.T) {
	tests := []struct {
		outer, inner time.Duration
		wantName     string
		wantElapsed  time.Duration
	}{
		{10 * time.Second, 2 * time.Second, "inner", 2 * time.Second},
		{2 * time.Second, 10 * time.Second, "outer", 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.wantName, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mp, reader := newMeter(t)
				outer := mustNew(t, Config{Name: "outer", Timeout: tt.outer, MeterProvider: mp})
				inner := mustNew(t, Config{Name: "inner", Timeout: tt.inner, MeterProvider: mp})
				start := time.Now()
				err := outer.Execute(context.Background(), func(ctx context.Context) error {
					return inner.Execute(ctx, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
				})
				if elapsed := time.Since(start); elapsed != tt.wantElapsed {
					t.Errorf("elapsed = %v, want %v", elapsed, tt.wantElapsed)
				}
				var ee *ExceededError
				if !errors.As(err, &ee) || ee.Name != tt.wantName || errors.As(ee.Err, new(*ExceededError)) {
					t.Errorf("err = %v, want one ExceededError from %q", err, tt.wantName)
				}
				if got := collect(t, reader, telemetry.MetricTimeouts); len(got) != 1 || got[tt.wantName] != 1 {
					t.Errorf("watertight.timeouts = %v, want {%s: 1}", got, tt.wantName)
				}
			})
		})
	}
}

func TestAllocs(t *testing.T) {
	d := mustNew(t, Config{Timeout: time.Minute})
	fn := func(context.Context) error { return nil }
	sooner, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if got := testing.AllocsPerRun(100, func() { d.Execute(sooner, fn) }); got != 0 {
		t.Errorf("Execute with a sooner parent deadline: %v allocs, want 0 (no timer)", got)
	}
	floor := testing.AllocsPerRun(100, func() {
		_, cancel := context.WithTimeoutCause(context.Background(), time.Minute, d.Cause())
		cancel()
	})
	if got := testing.AllocsPerRun(100, func() { d.Execute(context.Background(), fn) }); got > floor {
		t.Errorf("Execute: %v allocs, want at most context.WithTimeoutCause's %v", got, floor)
	}
	if got := testing.AllocsPerRun(100, func() {
		_, timer := d.Start(context.Background())
		timer.Stop(nil)
	}); got > floor {
		t.Errorf("Start+Stop: %v allocs, want at most context.WithTimeoutCause's %v", got, floor)
	}
}

func TestNameInMessages(t *testing.T) {
	_, err := New(Config{Name: "x"})
	if err == nil || !strings.Contains(err.Error(), "Config.Timeout") {
		t.Errorf("New error %v does not name Config.Timeout", err)
	}
}

package retry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

var errBoom = errors.New("boom")

func mustNew(t testing.TB, cfg Config) *Retry {
	t.Helper()
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = noop.NewMeterProvider()
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return r
}

// retryAfterErr asks for the next wait.
type retryAfterErr struct{ d time.Duration }

func (e retryAfterErr) Error() string             { return "429 slow down" }
func (e retryAfterErr) RetryAfter() time.Duration { return e.d }

// run executes r with an fn that fails with errFor(attempt) and records the
// time between attempts. idle is the time from the last attempt's start to
// Execute's return.
type runResult struct {
	waits []time.Duration
	calls int
	idle  time.Duration
	err   error
}

func run(ctx context.Context, r *Retry, errFor func(n int) error) runResult {
	var res runResult
	last := time.Now()
	res.err = r.Execute(ctx, func(ctx context.Context) error {
		res.calls++
		if res.calls > 1 {
			res.waits = append(res.waits, time.Since(last))
		}
		last = time.Now()
		return errFor(res.calls)
	})
	res.idle = time.Since(last)
	return res
}

func always(err error) func(int) error { return func(int) error { return err } }

// scheduleFunc is a schedule of the waits its function gives, until it
// reports false. Its -1ns, backoff.Stop, is a negative wait as others are.
type scheduleFunc func() (time.Duration, bool)

func (f scheduleFunc) Reset() {}

func (f scheduleFunc) NextBackOff() time.Duration {
	w, ok := f()
	switch {
	case !ok:
		return backoff.Stop
	case w == backoff.Stop:
		return w - 1
	}
	return w
}

// zeroWaits is a Config.NewSchedule with no waits.
func zeroWaits() backoff.BackOff { return &backoff.ZeroBackOff{} }

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestExponentialScheduleNoJitter(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		cfg  Config
		want []time.Duration
	}{
		{"defaults", Config{Jitter: noJitter}, []time.Duration{100 * ms, 200 * ms}},
		{"capped at MaxInterval", Config{MaxAttempts: 8, MaxInterval: time.Second, Jitter: noJitter},
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1000 * ms, 1000 * ms, 1000 * ms}},
		{"default MaxInterval 10s", Config{MaxAttempts: 10, InitialInterval: time.Second, Jitter: noJitter},
			[]time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second,
				10 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second}},
		{"InitialInterval 10ms", Config{MaxAttempts: 4, InitialInterval: 10 * ms, Jitter: noJitter},
			[]time.Duration{10 * ms, 20 * ms, 40 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tt.cfg.Name = "sched"
				r := mustNew(t, tt.cfg)
				res := run(t.Context(), r, always(errBoom))
				if !equalDurations(res.waits, tt.want) {
					t.Errorf("waits = %v, want %v", res.waits, tt.want)
				}
				if res.calls != MaxAttemptsOf(r) || res.idle != 0 {
					t.Errorf("calls = %d, idle = %v; want %d, 0", res.calls, res.idle, MaxAttemptsOf(r))
				}
				if !errors.Is(res.err, ErrExhausted) || !errors.Is(res.err, errBoom) {
					t.Errorf("err = %v, want ErrExhausted and errBoom", res.err)
				}
				want := fmt.Sprintf(`retry "sched": gave up after %d attempts: boom`, MaxAttemptsOf(r))
				if res.err.Error() != want {
					t.Errorf("err = %q, want %q", res.err, want)
				}
			})
		})
	}
}

// A fresh schedule per call: a second call starts again at InitialInterval.
func TestScheduleIsPerCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := mustNew(t, Config{Jitter: noJitter})
		for i := range 3 {
			res := run(t.Context(), r, always(errBoom))
			want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}
			if !equalDurations(res.waits, want) {
				t.Fatalf("call %d: waits = %v, want %v", i, res.waits, want)
			}
		}
	})
}

func TestJitterBounds(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name   string
		cfg    Config
		base   []time.Duration
		jitter float64
		max    time.Duration
	}{
		{"default 0.5", Config{MaxAttempts: 4}, []time.Duration{100 * ms, 200 * ms, 400 * ms}, 0.5, 10 * time.Second},
		{"0.2", Config{MaxAttempts: 4, Jitter: 0.2}, []time.Duration{100 * ms, 200 * ms, 400 * ms}, 0.2, 10 * time.Second},
		{"1", Config{MaxAttempts: 4, Jitter: 1}, []time.Duration{100 * ms, 200 * ms, 400 * ms}, 1, 10 * time.Second},
		// backoff caps before randomising; the wait itself must be capped too.
		{"capped after randomising", Config{MaxAttempts: 3, InitialInterval: time.Second, MaxInterval: time.Second},
			[]time.Duration{time.Second, time.Second}, 0.5, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := mustNew(t, tt.cfg)
				lo := make([]time.Duration, len(tt.base))
				hi := make([]time.Duration, len(tt.base))
				for i := range lo {
					lo[i] = math.MaxInt64
				}
				for range 200 {
					res := run(t.Context(), r, always(errBoom))
					if len(res.waits) != len(tt.base) {
						t.Fatalf("waits = %v", res.waits)
					}
					for i, w := range res.waits {
						b := float64(tt.base[i])
						min := time.Duration(b * (1 - tt.jitter))
						max := time.Duration(b*(1+tt.jitter)) + 1 // backoff's +1ns
						max = min2(max, tt.max)
						if w < min || w > max {
							t.Fatalf("wait %d = %v, want in [%v, %v]", i, w, min, max)
						}
						lo[i] = min2(lo[i], w)
						hi[i] = max2(hi[i], w)
					}
				}
				// Randomised: 200 uniform samples span most of the range.
				for i, b := range tt.base {
					spread := float64(hi[i]-lo[i]) / float64(b)
					if spread < tt.jitter*0.5 {
						t.Errorf("wait %d spans [%v, %v]: not randomised by %v", i, lo[i], hi[i], tt.jitter)
					}
				}
			})
		})
	}
}

func min2(a, b time.Duration) time.Duration { return min(a, b) }
func max2(a, b time.Duration) time.Duration { return max(a, b) }

func TestRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := mustNew(t, Config{Name: "api", MaxAttempts: 4, Jitter: noJitter})
		// Attempt 1 asks for 3s (wrapped: found anywhere in the chain), attempt
		// 2 asks for 0 (falls back to the schedule, built only now), attempt 3
		// for exactly MaxInterval.
		res := run(t.Context(), r, func(n int) error {
			switch n {
			case 1:
				return fmt.Errorf("call: %w", retryAfterErr{3 * time.Second})
			case 2:
				return retryAfterErr{0}
			case 3:
				return retryAfterErr{10 * time.Second}
			}
			return nil
		})
		want := []time.Duration{3 * time.Second, 100 * time.Millisecond, 10 * time.Second}
		if res.err != nil || !equalDurations(res.waits, want) {
			t.Errorf("err = %v, waits = %v; want nil, %v", res.err, res.waits, want)
		}
	})
}

func TestRetryAfterBeyondMaxInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var retries int
		r := mustNew(t, Config{Name: "api", OnRetry: func(context.Context, int, error, time.Duration) { retries++ }})
		cause := retryAfterErr{30 * time.Second}
		res := run(t.Context(), r, always(cause))
		if res.calls != 1 || res.idle != 0 || retries != 0 {
			t.Errorf("calls = %d, idle = %v, retries = %d; want 1, 0, 0", res.calls, res.idle, retries)
		}
		if !errors.Is(res.err, ErrExhausted) || !errors.Is(res.err, cause) {
			t.Errorf("err = %v, want ErrExhausted and the cause", res.err)
		}
		want := `retry "api": gave up after 1 attempt: server asked to wait 30s, more than MaxInterval 10s: 429 slow down`
		if res.err.Error() != want {
			t.Errorf("err = %q, want %q", res.err, want)
		}
		var ee *ExhaustedError
		if !errors.As(res.err, &ee) || ee.Reason != ReasonRetryAfter || ee.wait != 30*time.Second || ee.Attempts != 1 {
			t.Errorf("ExhaustedError = %+v", ee)
		}
	})
}

func TestDeadline(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name      string
		timeout   time.Duration
		wantCalls int
		wantWait  time.Duration // refused
	}{
		// Attempt 2 at 200ms; the next wait of 400ms would end at 600ms.
		{"passes", 550 * ms, 2, 400 * ms},
		{"reaches exactly", 600 * ms, 2, 400 * ms},
		{"fits", 601 * ms, 3, 0},
		{"first wait passes", 150 * ms, 1, 200 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := mustNew(t, Config{Name: "d", MaxAttempts: 3, InitialInterval: 200 * ms, Jitter: noJitter})
				ctx, cancel := context.WithTimeout(t.Context(), tt.timeout)
				defer cancel()
				res := run(ctx, r, always(errBoom))
				if res.calls != tt.wantCalls || res.idle != 0 {
					t.Fatalf("calls = %d, idle = %v; want %d, 0", res.calls, res.idle, tt.wantCalls)
				}
				var ee *ExhaustedError
				if !errors.As(res.err, &ee) || !errors.Is(res.err, errBoom) {
					t.Fatalf("err = %v, want an ExhaustedError wrapping errBoom", res.err)
				}
				if tt.wantWait == 0 {
					if ee.Reason != ReasonMaxAttempts {
						t.Errorf("reason = %q, want max_attempts", ee.Reason)
					}
					return
				}
				want := fmt.Sprintf(`retry "d": gave up after %d attempt%s: next wait of %v would pass the deadline: boom`,
					tt.wantCalls, map[bool]string{true: "", false: "s"}[tt.wantCalls == 1], tt.wantWait)
				if ee.Reason != ReasonDeadline || res.err.Error() != want {
					t.Errorf("reason = %q, err = %q; want deadline, %q", ee.Reason, res.err, want)
				}
			})
		})
	}
}

func TestPermanent(t *testing.T) {
	if policy.Permanent(nil) != nil {
		t.Error("policy.Permanent(nil) != nil")
	}
	wrapped := fmt.Errorf("op: %w", policy.Permanent(errBoom))
	tests := []struct {
		name string
		err  error
		want error // the error the call must return, exactly
	}{
		{"direct", policy.Permanent(errBoom), errBoom},
		{"marked twice", policy.Permanent(policy.Permanent(errBoom)), errBoom},
		// A marker inside another error is not stripped: the wrapper (an
		// attempt deadline's ExceededError, say) keeps its meaning.
		{"wrapped", wrapped, wrapped},
		// backoff's markers are honoured and stripped too.
		{"backoff.Permanent", backoff.Permanent(errBoom), errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := mustNew(t, Config{})
				res := run(t.Context(), r, always(tt.err))
				if res.calls != 1 || !sameOrSettled(res.err, tt.want) || !errors.Is(res.err, errBoom) {
					t.Errorf("calls = %d, err = %#v; want 1, %v", res.calls, res.err, tt.want)
				}
			})
		})
	}
}

// sameOrSettled reports whether got is want itself or, for a want with a
// marker deeper in its chain, want settled: matching it with errors.Is,
// with its message, and honoured by no Retry.
func sameOrSettled(got, want error) bool {
	if got == want {
		return true
	}
	return policy.IsPermanent(want) && errors.Is(got, want) && got.Error() == want.Error() && !policy.IsPermanent(got)
}

// A Permanent marker never reaches the caller, even when another rule ends
// the call first.
func TestPermanentUnmarkedByEveryRule(t *testing.T) {
	rejected := policy.NewRejectedError("breaker", "b", "open", nil)
	r := mustNew(t, Config{})
	if err := r.Execute(t.Context(), func(context.Context) error { return policy.Permanent(rejected) }); err != rejected {
		t.Errorf("policy.Permanent(rejection): err = %#v, want the rejection itself", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	err := r.Execute(ctx, func(context.Context) error { cancel(); return policy.Permanent(errBoom) })
	if err != errBoom {
		t.Errorf("Permanent with ctx canceled: err = %#v, want errBoom itself", err)
	}
}

func TestRejectionNotRetried(t *testing.T) {
	errOpen := policy.NewSentinel("breaker: open")
	rejected := policy.NewRejectedError("breaker", "b", "open", errOpen)
	for _, err := range []error{rejected, errOpen, fmt.Errorf("pipeline: %w", rejected)} {
		t.Run(err.Error(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var retries int
				r := mustNew(t, Config{OnRetry: func(context.Context, int, error, time.Duration) { retries++ }})
				res := run(t.Context(), r, always(err))
				if res.calls != 1 || res.err != err || retries != 0 {
					t.Errorf("calls = %d, err = %v, retries = %d; want 1, unchanged, 0", res.calls, res.err, retries)
				}
			})
		})
	}
}

func TestContextDoneBeforeNext(t *testing.T) {
	tests := []struct {
		name string
		fn   func(ctx context.Context, cancel context.CancelFunc) error
		ctx  func(context.Context) (context.Context, context.CancelFunc)
		want error
	}{
		{"canceled in fn",
			func(ctx context.Context, cancel context.CancelFunc) error { cancel(); return errBoom },
			func(ctx context.Context) (context.Context, context.CancelFunc) { return context.WithCancel(ctx) },
			errBoom},
		{"call deadline passed in fn",
			func(ctx context.Context, _ context.CancelFunc) error { <-ctx.Done(); return ctx.Err() },
			func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, time.Second)
			},
			context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var retries int
				r := mustNew(t, Config{OnRetry: func(context.Context, int, error, time.Duration) { retries++ }})
				ctx, cancel := tt.ctx(t.Context())
				defer cancel()
				calls := 0
				err := r.Execute(ctx, func(ctx context.Context) error { calls++; return tt.fn(ctx, cancel) })
				if calls != 1 || err != tt.want || retries != 0 {
					t.Errorf("calls = %d, err = %v, retries = %d; want 1, %v unchanged, 0", calls, err, retries, tt.want)
				}
			})
		})
	}
}

func TestCanceledDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := mustNew(t, Config{Name: "w", InitialInterval: time.Second, Jitter: noJitter})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		time.AfterFunc(300*time.Millisecond, cancel)
		res := run(ctx, r, always(errBoom))
		if res.calls != 1 || res.idle != 300*time.Millisecond {
			t.Errorf("calls = %d, idle = %v; want 1, 300ms", res.calls, res.idle)
		}
		if !errors.Is(res.err, context.Canceled) || !errors.Is(res.err, errBoom) || errors.Is(res.err, ErrExhausted) {
			t.Errorf("err = %v, want Canceled and errBoom, not ErrExhausted", res.err)
		}
		want := `retry "w": context canceled while waiting after attempt 1: boom`
		if res.err.Error() != want {
			t.Errorf("err = %q, want %q", res.err, want)
		}
	})
}

// A wait of zero still notices a context that ended meanwhile (in OnRetry).
func TestCanceledBeforeZeroWait(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := mustNew(t, Config{
		NewSchedule: zeroWaits,
		OnRetry:     func(context.Context, int, error, time.Duration) { cancel() },
	})
	calls := 0
	err := r.Execute(ctx, func(context.Context) error { calls++; return errBoom })
	if calls != 1 || !errors.Is(err, context.Canceled) || !errors.Is(err, errBoom) {
		t.Errorf("calls = %d, err = %v; want 1, Canceled and errBoom", calls, err)
	}
}

func TestAttemptTimeoutsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := mustNew(t, Config{MaxAttempts: 3, Jitter: noJitter})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		calls := 0
		start := time.Now()
		err := r.Execute(ctx, func(ctx context.Context) error {
			calls++
			if calls == 3 {
				return nil
			}
			actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			<-actx.Done()
			return fmt.Errorf("attempt: %w", actx.Err())
		})
		if err != nil || calls != 3 {
			t.Errorf("err = %v, calls = %d; want nil, 3", err, calls)
		}
		if got, want := time.Since(start), 50*time.Millisecond+100*time.Millisecond+50*time.Millisecond+200*time.Millisecond; got != want {
			t.Errorf("took %v, want %v", got, want)
		}
	})
}

func TestShouldRetry(t *testing.T) {
	errFatal := errors.New("fatal")
	var seen []error
	r := mustNew(t, Config{
		MaxAttempts: 5,
		NewSchedule: zeroWaits,
		ShouldRetry: func(err error) bool { seen = append(seen, err); return !errors.Is(err, errFatal) },
	})
	wrapped := fmt.Errorf("op: %w", errFatal)
	res := run(t.Context(), r, func(n int) error {
		if n < 3 {
			return errBoom
		}
		return wrapped
	})
	if res.calls != 3 || res.err != wrapped {
		t.Errorf("calls = %d, err = %v; want 3, the fatal error unchanged", res.calls, res.err)
	}
	if len(seen) != 3 || seen[0] != errBoom || seen[2] != wrapped {
		t.Errorf("ShouldRetry saw %v", seen)
	}
	// ShouldRetry is not asked about what the fixed rules settle.
	seen = nil
	run(t.Context(), r, always(policy.Permanent(errBoom)))
	run(t.Context(), r, always(policy.NewRejectedError("bulkhead", "", "full", nil)))
	if len(seen) != 0 {
		t.Errorf("ShouldRetry asked about %v", seen)
	}
}

func TestAttemptNumber(t *testing.T) {
	if n := Attempt(t.Context()); n != 0 {
		t.Errorf("Attempt outside = %d, want 0", n)
	}
	r := mustNew(t, Config{NewSchedule: zeroWaits})
	var got []int
	err := r.Execute(t.Context(), func(ctx context.Context) error {
		got = append(got, Attempt(ctx))
		return errBoom
	})
	if !errors.Is(err, ErrExhausted) || len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Errorf("attempts = %v, err = %v; want [1 2 3], exhausted", got, err)
	}
	// Nested: the innermost Retry's number.
	inner := mustNew(t, Config{MaxAttempts: 2, NewSchedule: zeroWaits})
	got = nil
	_ = r.Execute(t.Context(), func(ctx context.Context) error {
		return inner.Execute(ctx, func(ctx context.Context) error { got = append(got, Attempt(ctx)); return errBoom })
	})
	if len(got) != 6 || got[0] != 1 || got[1] != 2 || got[2] != 1 {
		t.Errorf("nested attempts = %v", got)
	}
}

// countingSchedule is a schedule that counts its use and notices sharing.
type countingSchedule struct {
	interval time.Duration
	stopAt   int // Next says stop on this call (1-based); 0 never
	calls    int // not atomic: the race detector catches a shared schedule
	busy     atomic.Bool
	t        testing.TB
}

func (b *countingSchedule) Reset() {}

func (b *countingSchedule) NextBackOff() time.Duration {
	w, ok := b.next()
	if !ok {
		return backoff.Stop
	}
	return w
}

func (b *countingSchedule) next() (time.Duration, bool) {
	if !b.busy.CompareAndSwap(false, true) {
		b.t.Error("schedule used by two calls at once")
	}
	defer b.busy.Store(false)
	b.calls++
	if b.calls == b.stopAt {
		return 0, false
	}
	return b.interval, true
}

func TestNewSchedule(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name       string
		interval   time.Duration
		stopAt     int
		failures   int
		wantWaits  []time.Duration
		wantReason string // "" : success
		wantMsg    string
	}{
		{"constant", 250 * ms, 0, 3, []time.Duration{250 * ms, 250 * ms, 250 * ms}, "", ""},
		{"capped at MaxInterval", time.Hour, 0, 2, []time.Duration{time.Second, time.Second}, "", ""},
		{"negative is zero", -5 * ms, 0, 2, []time.Duration{0, 0}, "", ""},
		{"stop", 250 * ms, 2, 10, []time.Duration{250 * ms}, ReasonStopped,
			`retry "nb": gave up after 2 attempts: the schedule stopped: boom`},
		{"stop at once", 250 * ms, 1, 10, nil, ReasonStopped,
			`retry "nb": gave up after 1 attempt: the schedule stopped: boom`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var made []*countingSchedule
				var told []time.Duration
				r := mustNew(t, Config{
					Name: "nb", MaxAttempts: 10, MaxInterval: time.Second,
					OnRetry: func(_ context.Context, _ int, _ error, wait time.Duration) { told = append(told, wait) },
					NewSchedule: func() backoff.BackOff {
						b := &countingSchedule{interval: tt.interval, stopAt: tt.stopAt, t: t}
						made = append(made, b)
						return b
					},
				})
				// A call that succeeds at once builds nothing.
				if err := r.Execute(t.Context(), func(context.Context) error { return nil }); err != nil || len(made) != 0 {
					t.Fatalf("success: err = %v, schedules made = %d", err, len(made))
				}
				res := run(t.Context(), r, func(n int) error {
					if n <= tt.failures {
						return errBoom
					}
					return nil
				})
				if !equalDurations(res.waits, tt.wantWaits) || !equalDurations(told, tt.wantWaits) {
					t.Errorf("waits = %v, told OnRetry %v; want %v", res.waits, told, tt.wantWaits)
				}
				if len(made) != 1 {
					t.Fatalf("schedules made = %d, want 1", len(made))
				}
				if tt.wantReason == "" {
					if res.err != nil {
						t.Errorf("err = %v", res.err)
					}
					return
				}
				var ee *ExhaustedError
				if !errors.As(res.err, &ee) || ee.Reason != tt.wantReason || res.err.Error() != tt.wantMsg || res.idle != 0 {
					t.Errorf("err = %v (idle %v), want %q", res.err, res.idle, tt.wantMsg)
				}
			})
		})
	}
}

// A closure made by NewSchedule is a schedule with per-call state: every
// call starts it afresh.
func TestScheduleClosure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms := time.Millisecond
		r := mustNew(t, Config{MaxAttempts: 10, NewSchedule: func() backoff.BackOff {
			waits := []time.Duration{10 * ms, 30 * ms}
			return scheduleFunc(func() (time.Duration, bool) {
				if len(waits) == 0 {
					return 0, false
				}
				w := waits[0]
				waits = waits[1:]
				return w, true
			})
		}})
		for range 2 {
			res := run(t.Context(), r, always(errBoom))
			var ee *ExhaustedError
			if !equalDurations(res.waits, []time.Duration{10 * ms, 30 * ms}) || !errors.As(res.err, &ee) ||
				ee.Reason != ReasonStopped || ee.Attempts != 3 {
				t.Fatalf("waits = %v, err = %v; want [10ms 30ms], stopped after 3 attempts", res.waits, res.err)
			}
		}
	})
}

func TestNewScheduleNilPanics(t *testing.T) {
	r := mustNew(t, Config{NewSchedule: func() backoff.BackOff { return nil }})
	defer func() {
		if p := recover(); p != "retry: Config.NewSchedule returned nil" {
			t.Errorf("panic = %v, want one naming retry and NewSchedule", p)
		}
	}()
	_ = r.Execute(t.Context(), func(context.Context) error { return errBoom })
}

func TestMaxAttemptsHuge(t *testing.T) {
	r := mustNew(t, Config{MaxAttempts: math.MaxInt, NewSchedule: zeroWaits})
	if MaxAttemptsOf(r) != math.MaxInt {
		t.Fatalf("MaxAttempts() = %d", MaxAttemptsOf(r))
	}
	res := run(t.Context(), r, func(n int) error {
		if n == 5 {
			return policy.Permanent(errBoom)
		}
		if n > 5 {
			panic("spinning")
		}
		return errors.New("transient")
	})
	if res.calls != 5 || res.err != errBoom {
		t.Errorf("calls = %d, err = %v; want 5, errBoom", res.calls, res.err)
	}
}

func TestMaxAttempts(t *testing.T) {
	for _, n := range []int{1, 2, 7} {
		r := mustNew(t, Config{MaxAttempts: n, NewSchedule: zeroWaits})
		res := run(t.Context(), r, always(errBoom))
		var ee *ExhaustedError
		if res.calls != n || !errors.As(res.err, &ee) || ee.Attempts != n || ee.Reason != ReasonMaxAttempts {
			t.Errorf("MaxAttempts %d: calls = %d, err = %v", n, res.calls, res.err)
		}
	}
	if got := MaxAttemptsOf(mustNew(t, Config{})); got != defaultMaxAttempts {
		t.Errorf("default MaxAttempts() = %d, want 3", got)
	}
}

func TestExhaustedError(t *testing.T) {
	r := mustNew(t, Config{NewSchedule: zeroWaits})
	err := r.Execute(t.Context(), func(context.Context) error { return errBoom })
	if got := telemetry.ErrorType(err); got != telemetry.TypeExhausted {
		t.Errorf("ErrorType = %q, want %q", got, telemetry.TypeExhausted)
	}
	if errors.Unwrap(err) != errBoom {
		t.Errorf("Unwrap = %v", errors.Unwrap(err))
	}
	if err.Error() != "retry: gave up after 3 attempts: boom" {
		t.Errorf("unnamed message = %q", err)
	}
	if msg := (&ExhaustedError{}).Error(); msg != "retry: gave up after 0 attempts" {
		t.Errorf("zero ExhaustedError = %q", msg)
	}
}

func TestOnRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type call struct {
			attempt int
			err     error
			wait    time.Duration
			ctxOK   bool
			at      time.Duration
		}
		type key struct{}
		var calls []call
		start := time.Now()
		r := mustNew(t, Config{
			MaxAttempts: 3, Jitter: noJitter,
			OnRetry: func(ctx context.Context, attempt int, err error, wait time.Duration) {
				calls = append(calls, call{attempt, err, wait, ctx.Value(key{}) == "v" && Attempt(ctx) == 0, time.Since(start)})
			},
		})
		ctx := context.WithValue(t.Context(), key{}, "v")
		errs := []error{errors.New("e1"), errors.New("e2"), errors.New("e3")}
		res := run(ctx, r, func(n int) error { return errs[n-1] })
		want := []call{
			{1, errs[0], 100 * time.Millisecond, true, 0},
			{2, errs[1], 200 * time.Millisecond, true, 100 * time.Millisecond},
		}
		if len(calls) != len(want) {
			t.Fatalf("OnRetry calls = %+v, want %+v", calls, want)
		}
		for i := range want {
			if calls[i] != want[i] {
				t.Errorf("OnRetry call %d = %+v, want %+v", i, calls[i], want[i])
			}
		}
		if !errors.Is(res.err, errs[2]) {
			t.Errorf("err = %v", res.err)
		}
	})
}

func TestNext(t *testing.T) {
	r := mustNew(t, Config{})
	if again, next, final := r.Next(t.Context(), 1, nil, nil); again || next != nil || final != nil {
		t.Errorf("Next(nil err) = %v, %v, %v", again, next, final)
	}
	// The state Next hands back is the call's own schedule, reused.
	r = mustNew(t, Config{MaxAttempts: 4, NewSchedule: zeroWaits})
	again, s1, _ := r.Next(t.Context(), 1, errBoom, nil)
	again2, s2, _ := r.Next(t.Context(), 2, errBoom, s1)
	if !again || !again2 || s1 == nil || s1 != s2 {
		t.Errorf("state not kept: %v %v %p %p", again, again2, s1, s2)
	}
}

// sums reads every int64 counter of r as name -> attribute set -> value.
func sums(t *testing.T, r *sdkmetric.ManualReader) map[string]map[attribute.Set]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[attribute.Set]int64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != telemetry.ScopeName {
			t.Errorf("scope = %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			out[m.Name] = map[attribute.Set]int64{}
			for _, dp := range sum.DataPoints {
				out[m.Name][dp.Attributes] = dp.Value
			}
		}
	}
	return out
}

func TestTelemetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		defer tp.Shutdown(context.Background())

		r, err := New(Config{Name: "llm", MaxAttempts: 3, Jitter: noJitter, MeterProvider: mp})
		if err != nil {
			t.Fatal(err)
		}
		ctx, span := tp.Tracer("test").Start(t.Context(), "parent")
		// Exhausted: 3 attempts, 2 retries.
		run(ctx, r, always(errBoom))
		// Success on attempt 2: 1 retry.
		run(ctx, r, func(n int) error {
			if n == 1 {
				return errBoom
			}
			return nil
		})
		// Success at once, rejection, permanent: nothing counted.
		run(ctx, r, always(nil))
		run(ctx, r, always(policy.NewRejectedError("bulkhead", "b", "full", nil)))
		run(ctx, r, always(policy.Permanent(errBoom)))
		span.End()

		attrs := attribute.NewSet(telemetry.KeyKind.String("retry"), telemetry.KeyName.String("llm"))
		got := sums(t, reader)
		if v := got[telemetry.MetricAttempts][attrs]; v != 3 || len(got[telemetry.MetricAttempts]) != 1 {
			t.Errorf("attempts = %v, want {%v: 3}", got[telemetry.MetricAttempts], attrs.Encoded(attribute.DefaultEncoder()))
		}
		exhaustedAttrs := attribute.NewSet(telemetry.KeyKind.String("retry"), telemetry.KeyName.String("llm"), telemetry.KeyRetryReason.String(ReasonMaxAttempts))
		if v := got[telemetry.MetricExhausted][exhaustedAttrs]; v != 1 || len(got[telemetry.MetricExhausted]) != 1 {
			t.Errorf("exhausted = %v, want 1", got[telemetry.MetricExhausted])
		}

		spans := sr.Ended()
		if len(spans) != 1 {
			t.Fatalf("spans = %d, want 1 (retry starts none)", len(spans))
		}
		type ev struct {
			attempt int64
			wait    float64
		}
		want := []ev{{2, 0.1}, {3, 0.2}, {2, 0.1}}
		events := spans[0].Events()
		if len(events) != len(want) {
			t.Fatalf("events = %v, want %d", events, len(want))
		}
		for i, e := range events {
			set := attribute.NewSet(e.Attributes...)
			kindV, _ := set.Value(telemetry.KeyKind)
			nameV, _ := set.Value(telemetry.KeyName)
			attV, _ := set.Value(telemetry.KeyAttempt)
			waitV, _ := set.Value(telemetry.KeyWait)
			if e.Name != telemetry.EventRetry || kindV.AsString() != "retry" || nameV.AsString() != "llm" ||
				attV.AsInt64() != want[i].attempt || waitV.AsFloat64() != want[i].wait || set.Len() != 4 {
				t.Errorf("event %d = %s %v, want attempt %d wait %v", i, e.Name, e.Attributes, want[i].attempt, want[i].wait)
			}
		}
	})
}

// Without a recording span there is nowhere to add events, and no error.
func TestNoSpan(t *testing.T) {
	r := mustNew(t, Config{NewSchedule: zeroWaits})
	if err := r.Execute(t.Context(), func(context.Context) error { return errBoom }); !errors.Is(err, ErrExhausted) {
		t.Errorf("err = %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name  string
		cfg   Config
		field string // "" : valid
		msg   string // the rest of the message
	}{
		{"zero", Config{}, "", ""},
		{"MaxAttempts 1", Config{MaxAttempts: 1}, "", ""},
		{"MaxAttempts MaxInt", Config{MaxAttempts: math.MaxInt}, "", ""},
		{"Initial == Max", Config{InitialInterval: time.Second, MaxInterval: time.Second}, "", ""},
		{"Jitter 1", Config{Jitter: 1}, "", ""},
		{"Jitter -1", Config{Jitter: -1}, "", ""},
		{"Jitter -Inf", Config{Jitter: math.Inf(-1)}, "", ""},
		{"Jitter tiny", Config{Jitter: 1e-9}, "", ""},
		{"MaxAttempts -1", Config{MaxAttempts: -1}, "Config.MaxAttempts", "must be >= 1, got -1"},
		{"MaxAttempts MinInt", Config{MaxAttempts: math.MinInt}, "Config.MaxAttempts", "must be >= 1, got -9223372036854775808"},
		{"InitialInterval negative", Config{InitialInterval: -time.Nanosecond}, "Config.InitialInterval", "must be > 0, got -1ns"},
		{"MaxInterval negative", Config{MaxInterval: -time.Second}, "Config.MaxInterval", "must be > 0, got -1s"},
		{"Initial > Max", Config{InitialInterval: 2 * time.Second, MaxInterval: time.Second}, "Config.MaxInterval", "(1s) must be >= Config.InitialInterval (2s)"},
		{"Initial > default Max", Config{InitialInterval: 20 * time.Second}, "Config.MaxInterval", "(10s) must be >= Config.InitialInterval (20s)"},
		{"Max < default Initial", Config{MaxInterval: 50 * time.Millisecond}, "Config.MaxInterval", "(50ms) must be >= Config.InitialInterval (100ms)"},
		{"Jitter 1.5", Config{Jitter: 1.5}, "Config.Jitter", "must be at most 1, got 1.5"},
		{"Jitter NaN", Config{Jitter: nan}, "Config.Jitter", "must be at most 1, got NaN"},
		{"Jitter +Inf", Config{Jitter: math.Inf(1)}, "Config.Jitter", "must be at most 1, got +Inf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.MeterProvider = noop.NewMeterProvider()
			r, err := New(tt.cfg)
			if tt.field == "" {
				if err != nil || r == nil {
					t.Errorf("New = %v, %v; want valid", r, err)
				}
				return
			}
			if err == nil || r != nil {
				t.Fatalf("New = %v, %v; want an error naming %s", r, err, tt.field)
			}
			if want := "retry: " + tt.field + " " + tt.msg; err.Error() != want {
				t.Errorf("err = %q, want %q", err, want)
			}
		})
	}
}

func TestNilPanics(t *testing.T) {
	r := mustNew(t, Config{})
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"nil ctx", func() { _ = r.Execute(nil, func(context.Context) error { return nil }) }, "retry: nil Context"}, //nolint:staticcheck
		{"nil fn", func() { _ = r.Execute(t.Context(), nil) }, "retry: nil fn"},
		{"Attempt nil ctx", func() { _ = Attempt(nil) }, "retry: nil Context"}, //nolint:staticcheck
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != tt.want {
					t.Errorf("panic = %v, want %q", p, tt.want)
				}
			}()
			tt.f()
		})
	}
}

func TestSuccessAllocatesOnlyTheAttemptContext(t *testing.T) {
	r := mustNew(t, Config{})
	ctx := t.Context()
	fn := func(context.Context) error { return nil }
	if n := testing.AllocsPerRun(100, func() { _ = r.Execute(ctx, fn) }); n != 1 {
		t.Errorf("allocs = %v, want 1", n)
	}
}

// Failing attempts allocate nothing beyond their contexts and the call's
// state, once: the schedule is free and the state passes without boxing.
func TestFailurePathAllocations(t *testing.T) {
	r := mustNew(t, Config{MaxAttempts: 4, NewSchedule: zeroWaits})
	ctx := t.Context()
	n := 0
	fn := func(context.Context) error {
		n++
		if n%4 != 0 {
			return errBoom
		}
		return nil
	}
	if got := testing.AllocsPerRun(100, func() { _ = r.Execute(ctx, fn) }); got != 5 {
		t.Errorf("allocs = %v, want 5 (one context per attempt, the call's state)", got)
	}
}

// Many goroutines share one Retry, with random failures and cancellations:
// no call passes MaxAttempts, no schedule is shared, every outcome is one
// the rules allow, and the counters add up.
func TestConcurrentStress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		const maxAttempts = 4
		var made, retries, ran, exhausted atomic.Int64
		r, err := New(Config{
			Name: "stress", MaxAttempts: maxAttempts, InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond, MeterProvider: mp,
			NewSchedule: func() backoff.BackOff {
				made.Add(1)
				return &countingSchedule{interval: time.Duration(rand.IntN(3)) * time.Millisecond, t: t}
			},
			OnRetry: func(context.Context, int, error, time.Duration) { retries.Add(1) },
		})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for range 50 {
					ctx, cancel := context.WithCancel(t.Context())
					if rand.IntN(3) == 0 {
						time.AfterFunc(time.Duration(rand.IntN(4))*time.Millisecond, cancel)
					}
					calls := 0
					var last error
					err := r.Execute(ctx, func(ctx context.Context) error {
						calls++
						if Attempt(ctx) != calls {
							t.Errorf("Attempt = %d, want %d", Attempt(ctx), calls)
						}
						time.Sleep(time.Duration(rand.IntN(2)) * time.Millisecond)
						switch rand.IntN(10) {
						case 0:
							last = nil
						case 1:
							last = policy.Permanent(errBoom)
						default:
							last = fmt.Errorf("transient %d", calls)
						}
						return last
					})
					if calls > maxAttempts {
						t.Errorf("calls = %d > %d", calls, maxAttempts)
					}
					ran.Add(int64(calls - 1))
					switch {
					case err == nil:
						if last != nil {
							t.Errorf("nil error after %v", last)
						}
					case errors.Is(err, ErrExhausted):
						exhausted.Add(1)
						if !errors.Is(err, last) {
							t.Errorf("exhausted %v does not wrap %v", err, last)
						}
					case err == errBoom:
						if !policy.IsPermanent(last) {
							t.Errorf("errBoom without Permanent")
						}
					case err == last:
						if ctx.Err() == nil {
							t.Errorf("%v returned unchanged with ctx live", err)
						}
					case errors.Is(err, context.Canceled):
						if !errors.Is(err, last) {
							t.Errorf("canceled %v lost %v", err, last)
						}
					default:
						t.Errorf("unexpected error %v", err)
					}
					cancel()
				}
			})
		}
		wg.Wait()
		attrs := attribute.NewSet(telemetry.KeyKind.String("retry"), telemetry.KeyName.String("stress"))
		got := sums(t, reader)
		// The counter holds attempts after the first that ran: a retry
		// scheduled (OnRetry) whose wait was canceled is not one.
		if v := got[telemetry.MetricAttempts][attrs]; v != ran.Load() || v > retries.Load() {
			t.Errorf("attempts counter = %d, attempts after the first = %d, OnRetry calls = %d", v, ran.Load(), retries.Load())
		}
		// Every exhaustion is counted under its reason, with the policy's
		// kind and name.
		var total int64
		for set, v := range got[telemetry.MetricExhausted] {
			reason, _ := set.Value(telemetry.KeyRetryReason)
			if set.Len() != 3 || !slices.Contains(reasons[:], reason.AsString()) {
				t.Errorf("exhausted series %v", set.Encoded(attribute.DefaultEncoder()))
			}
			total += v
		}
		if total != exhausted.Load() {
			t.Errorf("exhausted counter = %d, exhausted calls = %d", total, exhausted.Load())
		}
		if made.Load() == 0 || retries.Load() == 0 || exhausted.Load() == 0 {
			t.Errorf("stress too weak: made %d, retries %d, exhausted %d", made.Load(), retries.Load(), exhausted.Load())
		}
	})
}

// backoff's 15-minute MaxElapsedTime default is off: only MaxAttempts and
// the context end a call.
func TestNoElapsedTimeLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := mustNew(t, Config{MaxAttempts: 200, InitialInterval: 10 * time.Second, Jitter: noJitter})
		start := time.Now()
		res := run(t.Context(), r, always(errBoom))
		var ee *ExhaustedError
		if res.calls != 200 || !errors.As(res.err, &ee) || ee.Reason != ReasonMaxAttempts {
			t.Errorf("calls = %d, err = %v; want 200 attempts, max_attempts", res.calls, res.err)
		}
		if got := time.Since(start); got != 199*10*time.Second {
			t.Errorf("took %v, want %v", got, 199*10*time.Second)
		}
	})
}

// A schedule from NewSchedule is Reset before its first wait, as
// backoff.Retry does: an ExponentialBackOff built as a literal, not by
// NewExponentialBackOff, then starts at its InitialInterval, not at 0.
func TestNewScheduleIsReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var waits []time.Duration
		r := mustNew(t, Config{MaxAttempts: 3,
			NewSchedule: func() backoff.BackOff {
				return &backoff.ExponentialBackOff{InitialInterval: 10 * time.Millisecond, Multiplier: 2,
					MaxInterval: time.Second, Stop: backoff.Stop, Clock: backoff.SystemClock}
			},
			OnRetry: func(_ context.Context, _ int, _ error, w time.Duration) { waits = append(waits, w) },
		})
		run(t.Context(), r, always(errBoom))
		if !equalDurations(waits, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}) {
			t.Fatalf("waits %v, want [10ms 20ms]", waits)
		}
	})
}

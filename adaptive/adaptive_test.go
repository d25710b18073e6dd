package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/policy"
)

func mustNew(t testing.TB, cfg adaptive.Config) *adaptive.Limiter {
	t.Helper()
	l, err := adaptive.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func checkCounts(t *testing.T, l *adaptive.Limiter, active, queued int) {
	t.Helper()
	if a, q := l.Active(), l.Queued(); a != active || q != queued {
		t.Fatalf("Active, Queued = %d, %d; want %d, %d", a, q, active, queued)
	}
}

func checkRejection(t *testing.T, err error, name, reason string) {
	t.Helper()
	if !errors.Is(err, adaptive.ErrFull) || !errors.Is(err, policy.ErrRejected) {
		t.Fatalf("err = %v; want one matching ErrFull and policy.ErrRejected", err)
	}
	var re *policy.RejectedError
	if !errors.As(err, &re) {
		t.Fatalf("err = %T; want a *policy.RejectedError", err)
	}
	if re.Kind != adaptive.Kind || re.Name != name || re.Reason != reason {
		t.Fatalf("RejectedError = {%q %q %q}; want {adaptive %q %q}", re.Kind, re.Name, re.Reason, name, reason)
	}
}

// blocker runs calls in goroutines whose fn blocks until released, inside a
// synctest bubble.
type blocker struct {
	l    *adaptive.Limiter
	mu   sync.Mutex
	ran  []string
	errs chan error
	gate map[string]chan struct{}
}

func newBlocker(l *adaptive.Limiter) *blocker {
	return &blocker{l: l, errs: make(chan error, 100), gate: map[string]chan struct{}{}}
}

func (k *blocker) start(ctx context.Context, name string) {
	ch := make(chan struct{})
	k.mu.Lock()
	k.gate[name] = ch
	k.mu.Unlock()
	go func() {
		k.errs <- k.l.Execute(ctx, func(context.Context) error {
			k.mu.Lock()
			k.ran = append(k.ran, name)
			k.mu.Unlock()
			<-ch
			return nil
		})
	}()
	synctest.Wait()
}

func (k *blocker) release(name string) {
	k.mu.Lock()
	close(k.gate[name])
	k.mu.Unlock()
	synctest.Wait()
}

func (k *blocker) order() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return strings.Join(k.ran, ",")
}

func TestNewValidation(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name string
		cfg  adaptive.Config
		want string
	}{
		{"MinLimit -1", adaptive.Config{MinLimit: -1}, "adaptive: Config.MinLimit must be >= 1 (0 means 1), got -1"},
		{"MinLimit MinInt", adaptive.Config{MinLimit: math.MinInt}, "adaptive: Config.MinLimit "},
		{"MaxLimit < MinLimit", adaptive.Config{MinLimit: 5, MaxLimit: 3}, "adaptive: Config.MaxLimit must be >= MinLimit (5), got 3"},
		{"MaxLimit -1", adaptive.Config{MaxLimit: -1}, "adaptive: Config.MaxLimit must be >= MinLimit (1), got -1"},
		{"MaxLimit default < MinLimit", adaptive.Config{MinLimit: 300}, "adaptive: Config.MaxLimit must be >= MinLimit (300), got 0 (which means 200)"},
		{"InitialLimit above", adaptive.Config{MinLimit: 5, MaxLimit: 10, InitialLimit: 20}, "adaptive: Config.InitialLimit must be in [MinLimit, MaxLimit] ([5, 10]), got 20"},
		{"InitialLimit below", adaptive.Config{MinLimit: 5, InitialLimit: 4}, "adaptive: Config.InitialLimit "},
		{"InitialLimit -1", adaptive.Config{InitialLimit: -1}, "adaptive: Config.InitialLimit "},
		{"MaxQueue -2", adaptive.Config{MaxQueue: -2}, "adaptive: Config.MaxQueue must be >= 0 or Unbounded (-1), got -2"},
		{"MaxQueue MinInt", adaptive.Config{MaxQueue: math.MinInt}, "adaptive: Config.MaxQueue "},
		{"MaxWait -1", adaptive.Config{MaxWait: -1}, "adaptive: Config.MaxWait must be >= 0, got -1ns"},
		{"Tolerance 0.5", adaptive.Config{Tolerance: 0.5}, "adaptive: Config.Tolerance must be finite and >= 1 (0 means 1.25), got 0.5"},
		{"Tolerance -1", adaptive.Config{Tolerance: -1}, "adaptive: Config.Tolerance "},
		{"Tolerance NaN", adaptive.Config{Tolerance: nan}, "adaptive: Config.Tolerance "},
		{"Tolerance +Inf", adaptive.Config{Tolerance: math.Inf(1)}, "adaptive: Config.Tolerance "},
		{"ProbeInterval -1s", adaptive.Config{ProbeInterval: -time.Second}, "adaptive: Config.ProbeInterval must be >= 0 (0 means 30s), got -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := adaptive.New(tt.cfg)
			if err == nil {
				l.Close()
				t.Fatalf("New(%+v) = nil error; want %q", tt.cfg, tt.want)
			}
			if l != nil {
				t.Errorf("New returned a non-nil Limiter with an error")
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tt.want) {
				t.Errorf("error %q; want %q", msg, tt.want)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	tests := []struct {
		cfg       adaptive.Config
		wantLimit int // during the first probe: min(clamp(3, Min, Max), Initial)
		wantEst   float64
	}{
		{adaptive.Config{}, 3, 20},
		{adaptive.Config{MaxLimit: 8}, 3, 8},              // Initial 20 clamped to Max
		{adaptive.Config{MinLimit: 30}, 30, 30},           // Initial 20 clamped to Min; the probe at Min
		{adaptive.Config{MinLimit: 1, MaxLimit: 1}, 1, 1}, // the probe at 1
		{adaptive.Config{InitialLimit: 2}, 2, 2},          // the probe capped at Initial
		{adaptive.Config{MinLimit: 2, MaxLimit: 2, InitialLimit: 2}, 2, 2},
		{adaptive.Config{Tolerance: 1, ProbeInterval: time.Nanosecond, MaxQueue: adaptive.Unbounded, MaxWait: math.MaxInt64}, 3, 20},
	}
	for _, tt := range tests {
		l := mustNew(t, tt.cfg)
		if l.Admission() != tt.wantLimit || l.Limit() != int(tt.wantEst) || l.State().Estimate != tt.wantEst || !l.State().Probing {
			t.Errorf("New(%+v): admission %d, Limit() = %d, state %+v; want %d, limit and estimate %v, probing",
				tt.cfg, l.Admission(), l.Limit(), l.State(), tt.wantLimit, tt.wantEst)
		}
		wantMax := tt.cfg.MaxLimit
		if wantMax == 0 {
			wantMax = adaptive.DefaultMaxLimit
		}
		if l.MaxLimit() != wantMax {
			t.Errorf("New(%+v): MaxLimit() = %d; want %d", tt.cfg, l.MaxLimit(), wantMax)
		}
		if err := l.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Errorf("Execute = %v", err)
		}
	}
}

func TestNilPanics(t *testing.T) {
	l := mustNew(t, adaptive.Config{})
	fn := func(context.Context) error { return nil }
	tests := []struct {
		name string
		call func()
		want string
	}{
		{"Execute nil ctx", func() { l.Execute(nil, fn) }, "adaptive: nil Context"}, //nolint:staticcheck
		{"Execute nil fn", func() { l.Execute(context.Background(), nil) }, "adaptive: nil fn"},
		{"Acquire nil ctx", func() { l.Acquire(nil) }, "adaptive: nil Context"}, //nolint:staticcheck
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != tt.want {
					t.Errorf("panic = %v; want %q", r, tt.want)
				}
			}()
			tt.call()
		})
	}
	checkCounts(t, l, 0, 0)
}

func TestExecuteReturnsFnError(t *testing.T) {
	l := mustNew(t, adaptive.Config{})
	want := errors.New("boom")
	for _, fnErr := range []error{nil, want} {
		err := l.Execute(context.Background(), func(ctx context.Context) error {
			if a := l.Active(); a != 1 {
				t.Errorf("Active() inside fn = %d; want 1", a)
			}
			return fnErr
		})
		if err != fnErr {
			t.Errorf("Execute = %v; want %v", err, fnErr)
		}
	}
	checkCounts(t, l, 0, 0)
}

// TestExecuteAllocs: a call admitted at once and sampled allocates only
// its attempt's context; a rejection allocates nothing.
func TestExecuteAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ctx := context.Background()
	l := mustNew(t, adaptive.Config{MeterProvider: noop.NewMeterProvider()})
	fn := func(context.Context) error { return nil }
	for range 200 { // past the first probe (128 samples at most)
		l.Execute(ctx, fn)
	}
	if l.State().Probing {
		t.Fatal("still probing")
	}
	if n := testing.AllocsPerRun(1000, func() { l.Execute(ctx, fn) }); n != 1 {
		t.Errorf("Execute: %v allocs; want 1", n)
	}
	fail := errors.New("fail")
	if n := testing.AllocsPerRun(1000, func() { l.Execute(ctx, func(context.Context) error { return fail }) }); n != 1 {
		t.Errorf("Execute failing: %v allocs; want 1", n)
	}
	o := mustNew(t, adaptive.Config{MinLimit: 1, MaxLimit: 1, MeterProvider: noop.NewMeterProvider()})
	p, _ := o.Acquire(ctx)
	defer p.Release()
	if n := testing.AllocsPerRun(100, func() { o.Execute(ctx, fn) }); n != 0 {
		t.Errorf("rejected Execute: %v allocs; want 0", n)
	}
}

func TestRejectFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hooked []*policy.RejectedError
		l := mustNew(t, adaptive.Config{Name: "llm", InitialLimit: 2, MaxQueue: 1,
			OnReject: func(_ context.Context, err *policy.RejectedError) { hooked = append(hooked, err) }})
		if l.Limit() != 2 {
			t.Fatalf("Limit() = %d", l.Limit())
		}
		k := newBlocker(l)
		k.start(context.Background(), "a")
		k.start(context.Background(), "b")
		k.start(context.Background(), "q")
		checkCounts(t, l, 2, 1)
		var first error
		for range 3 {
			err := l.Execute(context.Background(), func(context.Context) error { t.Error("fn ran"); return nil })
			checkRejection(t, err, "llm", adaptive.ReasonFull)
			if first == nil {
				first = err
			} else if err != first {
				t.Error("rejections are not the same prepared error")
			}
		}
		if len(hooked) != 3 || hooked[0] != first {
			t.Errorf("OnReject saw %v", hooked)
		}
		for _, n := range []string{"a", "b", "q"} {
			k.release(n)
		}
		checkCounts(t, l, 0, 0)
		if got := k.order(); got != "a,b,q" {
			t.Errorf("ran %q", got)
		}
	})
}

func TestWaitTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{Name: "w", MinLimit: 1, MaxLimit: 1, MaxQueue: 1, MaxWait: time.Second})
		k := newBlocker(l)
		k.start(context.Background(), "holder")
		start := time.Now()
		err := l.Execute(context.Background(), func(context.Context) error { t.Error("fn ran"); return nil })
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("waited %v; want exactly MaxWait", waited)
		}
		checkRejection(t, err, "w", adaptive.ReasonWaitTimeout)
		checkCounts(t, l, 1, 0)
		// A waiter served before MaxWait runs.
		k.start(context.Background(), "waiter")
		time.Sleep(999 * time.Millisecond)
		k.release("holder")
		if got := k.order(); got != "holder,waiter" {
			t.Fatalf("ran %q", got)
		}
		k.release("waiter")
		checkCounts(t, l, 0, 0)
	})
}

// TestCanceledWaiters: waiters whose ctx ends leave the queue (not counted
// as rejections), from its middle too, and are skipped by the hand-off.
func TestCanceledWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rejects := 0
		l := mustNew(t, adaptive.Config{MinLimit: 1, MaxLimit: 1, MaxQueue: adaptive.Unbounded,
			OnReject: func(context.Context, *policy.RejectedError) { rejects++ }})
		k := newBlocker(l)
		k.start(context.Background(), "h")
		cancels := map[string]context.CancelFunc{}
		for _, n := range []string{"a", "b", "c", "d"} {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cancels[n] = cancel
			k.start(ctx, n)
		}
		checkCounts(t, l, 1, 4)
		cancels["b"]()
		cancels["d"]()
		synctest.Wait()
		checkCounts(t, l, 1, 2)
		for range 2 {
			if err := <-k.errs; err != context.Canceled {
				t.Errorf("canceled waiter: %v", err)
			}
		}
		for _, n := range []string{"h", "a", "c"} {
			k.release(n)
		}
		checkCounts(t, l, 0, 0)
		if got := k.order(); got != "h,a,c" || rejects != 0 {
			t.Errorf("ran %q, %d rejections", got, rejects)
		}
		canceled, cancel := context.WithCancel(context.Background())
		cancel()
		if err := l.Execute(canceled, func(context.Context) error { t.Error("fn ran"); return nil }); err != context.Canceled {
			t.Errorf("Execute with a canceled ctx = %v", err)
		}
	})
}

func TestPanicAndGoexitFreeTheSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{MinLimit: 1, MaxLimit: 1, MaxQueue: 1})
		type boom struct{}
		go func() {
			defer func() {
				if r := recover(); r != (boom{}) {
					t.Errorf("recovered %v", r)
				}
			}()
			l.Execute(context.Background(), func(context.Context) error {
				time.Sleep(time.Second)
				panic(boom{})
			})
		}()
		synctest.Wait()
		k := newBlocker(l)
		k.start(context.Background(), "waiter")
		checkCounts(t, l, 1, 1)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := k.order(); got != "waiter" {
			t.Fatalf("ran %q: the panicked call's slot did not go to the waiter", got)
		}
		k.release("waiter")
		checkCounts(t, l, 0, 0)

		done := make(chan struct{})
		go func() {
			defer close(done)
			l.Execute(context.Background(), func(context.Context) error {
				runtime.Goexit()
				return nil
			})
		}()
		<-done
		checkCounts(t, l, 0, 0)
		if err := l.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("Execute after Goexit = %v", err)
		}
	})
}

func TestAcquireHoldsASlotUntilRelease(t *testing.T) {
	l := mustNew(t, adaptive.Config{})
	p, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire = %v", err)
	}
	checkCounts(t, l, 1, 0)
	p.Release()
	checkCounts(t, l, 0, 0)
	var zero adaptive.Permit
	zero.Release()
	_, s := zero.Begin(context.Background())
	s.End(nil)
	checkCounts(t, l, 0, 0)
}

// TestAcquireAndReleaseDoNotSample: driven in two steps, the limiter
// learns only from Observe.
func TestAcquireAndReleaseDoNotSample(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{})
		ctx := context.Background()
		for range 50 {
			p, _ := l.Acquire(ctx)
			time.Sleep(10 * time.Millisecond)
			p.Release()
		}
		if st := l.State(); !st.Probing || st.Measured {
			t.Fatalf("after Enter/Exit alone: %+v; want still in the first probe", st)
		}
		for range 128 {
			p, _ := l.Acquire(ctx)
			time.Sleep(10 * time.Millisecond)
			l.Observe(7*time.Millisecond, false)
			p.Release()
		}
		if st := l.State(); st.Probing || st.NoLoad != 7*time.Millisecond {
			t.Fatalf("after 128 observations: %+v; want noLoad 7ms measured", st)
		}
	})
}

// TestExecuteClassifiesErrors: through Execute, a timeout is a latency
// sample, a cancellation or a rejection from below is no sample, and another
// error is a failure (no sample).
func TestExecuteClassifiesErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		run := func(l *adaptive.Limiter, err error) {
			for range 128 {
				l.Execute(ctx, func(context.Context) error { time.Sleep(5 * time.Millisecond); return err })
			}
		}
		for _, tt := range []struct {
			err      error
			measured bool
		}{
			{nil, true},
			{context.DeadlineExceeded, true},
			{fmt.Errorf("attempt: %w", context.DeadlineExceeded), true},
			{context.Canceled, false},
			{adaptive.ErrFull, false},
			{errors.New("boom"), false},
		} {
			l := mustNew(t, adaptive.Config{})
			run(l, tt.err)
			if st := l.State(); st.Measured != tt.measured || (st.Measured && st.NoLoad != 5*time.Millisecond) {
				t.Errorf("128 calls ending %v: %+v; want measured %v", tt.err, st, tt.measured)
			}
		}
	})
}

func TestCloseKeepsWorking(t *testing.T) {
	l := mustNew(t, adaptive.Config{})
	for range 3 {
		if err := l.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
	}
	if err := l.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Execute after Close = %v", err)
	}
}

package bulkhead

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/watertight/watertight/policy"
)

// mustNew returns a bulkhead for cfg or fails the test.
func mustNew(t testing.TB, cfg Config) *Bulkhead {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// checkCounts fails the test unless b has exactly active slots held and
// queued callers waiting.
func checkCounts(t *testing.T, b *Bulkhead, active, queued int) {
	t.Helper()
	if a, q := b.Active(), b.Queued(); a != active || q != queued {
		t.Fatalf("Active, Queued = %d, %d; want %d, %d", a, q, active, queued)
	}
}

// checkRejection fails the test unless err is the bulkhead rejection with
// name and reason.
func checkRejection(t *testing.T, err error, name, reason string) {
	t.Helper()
	if !errors.Is(err, ErrFull) || !errors.Is(err, policy.ErrRejected) {
		t.Fatalf("err = %v; want one matching ErrFull and policy.ErrRejected", err)
	}
	var re *policy.RejectedError
	if !errors.As(err, &re) {
		t.Fatalf("err = %T; want a *policy.RejectedError", err)
	}
	if re.Kind != "bulkhead" || re.Name != name || re.Reason != reason {
		t.Fatalf("RejectedError = {%q %q %q}; want {bulkhead %q %q}", re.Kind, re.Name, re.Reason, name, reason)
	}
}

// blocker runs calls in goroutines whose fn blocks until released. It is
// used inside synctest bubbles, where synctest.Wait makes "started and
// blocked" exact.
type blocker struct {
	b    *Bulkhead
	mu   sync.Mutex
	ran  []string   // names of fns that started, in order
	errs chan error // Execute results
	gate map[string]chan struct{}
}

func newBlocker(b *Bulkhead) *blocker {
	return &blocker{b: b, errs: make(chan error, 100), gate: map[string]chan struct{}{}}
}

// start runs a call named name with ctx, whose fn blocks until release(name),
// and waits until it is blocked (in fn or in the queue).
func (k *blocker) start(ctx context.Context, name string) {
	ch := make(chan struct{})
	k.mu.Lock()
	k.gate[name] = ch
	k.mu.Unlock()
	go func() {
		k.errs <- k.b.Execute(ctx, func(context.Context) error {
			k.mu.Lock()
			k.ran = append(k.ran, name)
			k.mu.Unlock()
			<-ch
			return nil
		})
	}()
	synctest.Wait()
}

// release lets the fn of name return and waits for the bulkhead to settle.
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
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"Limit 0", Config{Limit: 0}, "Config.Limit"},
		{"Limit -1", Config{Limit: -1}, "Config.Limit"},
		{"Limit MinInt", Config{Limit: math.MinInt}, "Config.Limit"},
		{"MaxQueue -2", Config{Limit: 1, MaxQueue: -2}, "Config.MaxQueue"},
		{"MaxQueue MinInt", Config{Limit: 1, MaxQueue: math.MinInt}, "Config.MaxQueue"},
		{"MaxWait -1", Config{Limit: 1, MaxWait: -1}, "Config.MaxWait"},
		{"MaxWait -1s", Config{Limit: 1, MaxWait: -time.Second}, "Config.MaxWait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.cfg)
			if err == nil {
				b.Close()
				t.Fatalf("New(%+v) = nil error; want one naming %s", tt.cfg, tt.field)
			}
			if b != nil {
				t.Errorf("New returned a non-nil Bulkhead with an error")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "bulkhead: "+tt.field+" ") {
				t.Errorf("error %q does not start with %q", msg, "bulkhead: "+tt.field)
			}
		})
	}
	if got := fmt.Sprint(func() error { _, err := New(Config{}); return err }()); got != "bulkhead: Config.Limit must be >= 1, got 0" {
		t.Errorf("zero Config error = %q", got)
	}
}

func TestNewValid(t *testing.T) {
	tests := []Config{
		{Limit: 1},
		{Limit: math.MaxInt, MaxQueue: Unbounded},
		{Limit: 3, MaxQueue: math.MaxInt, MaxWait: math.MaxInt64},
		{Name: "x", Limit: 1, MaxQueue: 0, MaxWait: 0},
	}
	for _, cfg := range tests {
		b, err := New(cfg)
		if err != nil {
			t.Errorf("New(%+v): %v", cfg, err)
			continue
		}
		if b.Limit() != cfg.Limit {
			t.Errorf("Limit() = %d; want %d", b.Limit(), cfg.Limit)
		}
		b.Close()
	}
}

func TestNilPanics(t *testing.T) {
	b := mustNew(t, Config{Limit: 1})
	fn := func(context.Context) error { return nil }
	tests := []struct {
		name string
		call func()
		want string
	}{
		{"Execute nil ctx", func() { b.Execute(nil, fn) }, "bulkhead: nil Context"}, //nolint:staticcheck
		{"Execute nil fn", func() { b.Execute(context.Background(), nil) }, "bulkhead: nil fn"},
		{"Enter nil ctx", func() { b.Enter(nil) }, "bulkhead: nil Context"}, //nolint:staticcheck
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
	checkCounts(t, b, 0, 0)
}

func TestExecuteReturnsFnError(t *testing.T) {
	b := mustNew(t, Config{Limit: 2})
	want := errors.New("boom")
	for _, fnErr := range []error{nil, want} {
		ran := false
		err := b.Execute(context.Background(), func(ctx context.Context) error {
			ran = true
			if a := b.Active(); a != 1 {
				t.Errorf("Active() inside fn = %d; want 1", a)
			}
			return fnErr
		})
		if err != fnErr || !ran {
			t.Errorf("Execute = %v, ran %v; want %v, true", err, ran, fnErr)
		}
	}
	checkCounts(t, b, 0, 0)
}

// TestNoAllocs checks that taking a free slot and being rejected allocate
// nothing.
func TestNoAllocs(t *testing.T) {
	ctx := context.Background()
	b := mustNew(t, Config{Limit: 1, MeterProvider: noop.NewMeterProvider()})
	fn := func(context.Context) error { return nil }
	if n := testing.AllocsPerRun(100, func() { b.Execute(ctx, fn) }); n != 0 {
		t.Errorf("Execute with a free slot: %v allocs; want 0", n)
	}
	b.Enter(ctx)
	defer b.Exit(ctx, Permit{}, nil)
	if n := testing.AllocsPerRun(100, func() { b.Execute(ctx, fn) }); n != 0 {
		t.Errorf("rejected Execute: %v allocs; want 0", n)
	}
}

func TestRejectFull(t *testing.T) {
	tests := []struct {
		name     string
		limit    int
		maxQueue int
	}{
		{"no queue", 1, 0},
		{"no queue limit 3", 3, 0},
		{"queue of 2 full", 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := mustNew(t, Config{Name: "llm", Limit: tt.limit, MaxQueue: tt.maxQueue})
				k := newBlocker(b)
				for i := range tt.limit + tt.maxQueue {
					k.start(context.Background(), fmt.Sprint(i))
				}
				checkCounts(t, b, tt.limit, tt.maxQueue)
				var first error
				for range 3 {
					ran := false
					err := b.Execute(context.Background(), func(context.Context) error { ran = true; return nil })
					if ran {
						t.Fatal("fn ran on a full bulkhead")
					}
					checkRejection(t, err, "llm", "full")
					if first == nil {
						first = err
					} else if err != first {
						t.Error("rejections are not the same prepared error")
					}
				}
				checkCounts(t, b, tt.limit, tt.maxQueue)
				for i := range tt.limit + tt.maxQueue {
					k.release(fmt.Sprint(i))
				}
				checkCounts(t, b, 0, 0)
			})
		})
	}
}

func TestWaitTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Name: "w", Limit: 1, MaxQueue: 1, MaxWait: time.Second})
		k := newBlocker(b)
		k.start(context.Background(), "holder")
		start := time.Now()
		ran := false
		err := b.Execute(context.Background(), func(context.Context) error { ran = true; return nil })
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("waited %v; want exactly MaxWait (1s)", waited)
		}
		if ran {
			t.Error("fn ran after MaxWait")
		}
		checkRejection(t, err, "w", "wait_timeout")
		// The waiter that left must never be handed the slot: the release
		// frees it instead.
		checkCounts(t, b, 1, 0)
		k.release("holder")
		checkCounts(t, b, 0, 0)
	})
}

func TestWaitGetsSlotBeforeMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Limit: 1, MaxQueue: 1, MaxWait: time.Second})
		k := newBlocker(b)
		k.start(context.Background(), "holder")
		k.start(context.Background(), "waiter")
		time.Sleep(999 * time.Millisecond)
		k.release("holder")
		if got := k.order(); got != "holder,waiter" {
			t.Fatalf("ran %q", got)
		}
		time.Sleep(time.Hour) // the waiter's MaxWait timer must not matter now
		checkCounts(t, b, 1, 0)
		k.release("waiter")
		checkCounts(t, b, 0, 0)
		for range 2 {
			if err := <-k.errs; err != nil {
				t.Errorf("Execute = %v", err)
			}
		}
	})
}

func TestContextDone(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	t.Run("on entry with a free slot", func(t *testing.T) {
		rejects := 0
		b := mustNew(t, Config{Limit: 1, OnReject: func(context.Context, *policy.RejectedError) { rejects++ }})
		ran := false
		err := b.Execute(canceled, func(context.Context) error { ran = true; return nil })
		if err != context.Canceled || ran || rejects != 0 {
			t.Errorf("Execute = %v, ran %v, rejects %d; want context.Canceled, false, 0", err, ran, rejects)
		}
		_, _, err = b.Enter(canceled)
		if err != context.Canceled {
			t.Errorf("Enter = %v; want context.Canceled", err)
		}
		checkCounts(t, b, 0, 0)
	})
	t.Run("on entry when full is not a rejection", func(t *testing.T) {
		rejects := 0
		b := mustNew(t, Config{Limit: 1, OnReject: func(context.Context, *policy.RejectedError) { rejects++ }})
		if _, _, err := b.Enter(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := b.Execute(canceled, func(context.Context) error { return nil }); err != context.Canceled || rejects != 0 {
			t.Errorf("Execute = %v, rejects %d; want context.Canceled, 0", err, rejects)
		}
		b.Exit(context.Background(), Permit{}, nil)
	})
	tests := []struct {
		name    string
		maxWait time.Duration
		ctx     func() (context.Context, context.CancelFunc)
		after   time.Duration // when the test cancels, if at all
		want    error
	}{
		{"canceled while waiting", 0, func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, time.Second, context.Canceled},
		{"deadline while waiting", 0, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Second)
		}, 0, context.DeadlineExceeded},
		{"deadline before MaxWait", time.Minute, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Second)
		}, 0, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rejects := 0
				b := mustNew(t, Config{Limit: 1, MaxQueue: 2, MaxWait: tt.maxWait,
					OnReject: func(context.Context, *policy.RejectedError) { rejects++ }})
				k := newBlocker(b)
				k.start(context.Background(), "holder")
				ctx, cancel := tt.ctx()
				defer cancel()
				k.start(ctx, "waiter")
				k.start(context.Background(), "next")
				checkCounts(t, b, 1, 2)
				if tt.after > 0 {
					time.Sleep(tt.after)
					cancel()
				}
				if err := <-k.errs; err != tt.want {
					t.Errorf("Execute = %v; want %v", err, tt.want)
				}
				// The waiter's place is freed and it is skipped by the hand-off.
				checkCounts(t, b, 1, 1)
				k.release("holder")
				if got := k.order(); got != "holder,next" {
					t.Errorf("ran %q; want holder,next", got)
				}
				k.release("next")
				checkCounts(t, b, 0, 0)
				if rejects != 0 {
					t.Errorf("OnReject called %d times for a context error", rejects)
				}
			})
		})
	}
}

func TestFIFOHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Limit: 1, MaxQueue: Unbounded})
		k := newBlocker(b)
		names := []string{"h", "w1", "w2", "w3", "w4", "w5"}
		for _, n := range names {
			k.start(context.Background(), n)
		}
		checkCounts(t, b, 1, 5)
		for i, n := range names {
			if got, want := k.order(), strings.Join(names[:i+1], ","); got != want {
				t.Fatalf("ran %q; want %q", got, want)
			}
			k.release(n)
		}
		checkCounts(t, b, 0, 0)
	})
}

func TestNoQueueJumping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Limit: 1, MaxQueue: 1})
		if _, _, err := b.Enter(context.Background()); err != nil {
			t.Fatal(err)
		}
		k := newBlocker(b)
		k.start(context.Background(), "waiter")
		checkCounts(t, b, 1, 1)
		b.Exit(context.Background(), Permit{}, nil)
		// The slot went to the waiter at once, even though it has not run
		// yet: a caller arriving now finds no free slot.
		checkCounts(t, b, 1, 0)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, _, err := b.Enter(ctx); err != context.DeadlineExceeded {
			t.Fatalf("newcomer Enter = %v; want it to queue behind the waiter and time out", err)
		}
		if got := k.order(); got != "waiter" {
			t.Errorf("ran %q; want waiter", got)
		}
		k.release("waiter")
		checkCounts(t, b, 0, 0)
	})
}

func TestCancelMiddleWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Limit: 1, MaxQueue: Unbounded})
		k := newBlocker(b)
		k.start(context.Background(), "h")
		ctxs := map[string]context.CancelFunc{}
		for _, n := range []string{"a", "b", "c", "d"} {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ctxs[n] = cancel
			k.start(ctx, n)
		}
		ctxs["b"]()
		ctxs["d"]() // the tail
		synctest.Wait()
		checkCounts(t, b, 1, 2)
		for _, n := range []string{"h", "a", "c"} {
			k.release(n)
		}
		if got := k.order(); got != "h,a,c" {
			t.Errorf("ran %q; want h,a,c", got)
		}
		checkCounts(t, b, 0, 0)
	})
}

func TestPanicFreesSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Limit: 1, MaxQueue: 1})
		type boom struct{}
		go func() {
			defer func() {
				if r := recover(); r != (boom{}) {
					t.Errorf("recovered %v; want the fn's panic", r)
				}
			}()
			b.Execute(context.Background(), func(context.Context) error {
				time.Sleep(time.Second)
				panic(boom{})
			})
			t.Error("Execute returned after fn panicked")
		}()
		synctest.Wait()
		k := newBlocker(b)
		k.start(context.Background(), "waiter")
		checkCounts(t, b, 1, 1)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := k.order(); got != "waiter" {
			t.Fatalf("ran %q; the panicked call's slot did not go to the waiter", got)
		}
		k.release("waiter")
		checkCounts(t, b, 0, 0)
	})
}

func TestGoexitFreesSlot(t *testing.T) {
	b := mustNew(t, Config{Limit: 1})
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Execute(context.Background(), func(context.Context) error {
			runtime.Goexit()
			return nil
		})
	}()
	<-done
	checkCounts(t, b, 0, 0)
	if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Execute after Goexit = %v", err)
	}
}

func TestExitWithoutEnterPanics(t *testing.T) {
	b := mustNew(t, Config{Limit: 2})
	defer func() {
		if r := recover(); r != "bulkhead: slot released twice" {
			t.Errorf("panic = %v", r)
		}
		checkCounts(t, b, 0, 0)
	}()
	b.Exit(context.Background(), Permit{}, nil)
}

func TestActiveQueuedExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Limit: 2, MaxQueue: Unbounded})
		k := newBlocker(b)
		steps := []struct{ active, queued int }{{1, 0}, {2, 0}, {2, 1}, {2, 2}, {2, 3}}
		for i, s := range steps {
			k.start(context.Background(), fmt.Sprint(i))
			checkCounts(t, b, s.active, s.queued)
		}
		for i, s := range []struct{ active, queued int }{{2, 2}, {2, 1}, {2, 0}, {1, 0}, {0, 0}} {
			k.release(fmt.Sprint(i))
			checkCounts(t, b, s.active, s.queued)
		}
	})
}

func TestHugeLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Limit: math.MaxInt, MaxQueue: Unbounded, MaxWait: math.MaxInt64})
		k := newBlocker(b)
		for i := range 100 {
			k.start(context.Background(), fmt.Sprint(i))
		}
		checkCounts(t, b, 100, 0)
		for i := range 100 {
			k.release(fmt.Sprint(i))
		}
		checkCounts(t, b, 0, 0)
	})
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Limit: 1, MaxQueue: Unbounded, MaxWait: math.MaxInt64})
		k := newBlocker(b)
		k.start(context.Background(), "h")
		k.start(context.Background(), "w")
		time.Sleep(24 * time.Hour * 365)
		checkCounts(t, b, 1, 1)
		k.release("h")
		if got := k.order(); got != "h,w" {
			t.Fatalf("ran %q", got)
		}
		k.release("w")
		for range 2 {
			if err := <-k.errs; err != nil {
				t.Fatalf("Execute = %v", err)
			}
		}
	})
}

func TestOnReject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type call struct {
			ctx context.Context
			err *policy.RejectedError
		}
		var calls []call
		var b *Bulkhead
		b = mustNew(t, Config{Name: "hook", Limit: 1, MaxQueue: 1, MaxWait: time.Second,
			OnReject: func(ctx context.Context, err *policy.RejectedError) {
				b.Active() // would deadlock if called under the lock
				calls = append(calls, call{ctx, err})
			}})
		k := newBlocker(b)
		k.start(context.Background(), "h")
		type key struct{}
		ctx := context.WithValue(context.Background(), key{}, "w")
		errWait := b.Execute(ctx, func(context.Context) error { return nil }) // waits 1s
		k.start(context.Background(), "q")                                    // queued
		errFull := b.Execute(ctx, func(context.Context) error { return nil })
		checkRejection(t, errWait, "hook", "wait_timeout")
		checkRejection(t, errFull, "hook", "full")
		if len(calls) != 2 {
			t.Fatalf("OnReject called %d times; want 2", len(calls))
		}
		for i, want := range []error{errWait, errFull} {
			if calls[i].err != want || calls[i].ctx != ctx {
				t.Errorf("call %d: OnReject(%v, %v); want the caller's ctx and the returned error", i, calls[i].ctx, calls[i].err)
			}
		}
		k.release("h")
		k.release("q")
		if len(calls) != 2 {
			t.Errorf("OnReject called for a success")
		}
	})
}

func TestCloseKeepsWorking(t *testing.T) {
	b := mustNew(t, Config{Limit: 1})
	for range 3 {
		if err := b.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
	}
	if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Execute after Close = %v", err)
	}
}

// stressCheck runs fn for many goroutines and checks that no more than
// limit fns ever run at once.
type stressCheck struct {
	t        *testing.T
	limit    int64
	inFlight atomic.Int64
	peak     atomic.Int64
	ran      atomic.Int64
}

func (s *stressCheck) enter() {
	n := s.inFlight.Add(1)
	if n > s.limit {
		s.t.Errorf("%d calls in flight; limit %d", n, s.limit)
	}
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	s.ran.Add(1)
}

func (s *stressCheck) exit() { s.inFlight.Add(-1) }

// checkErr accepts the outcomes a stressed call may have.
func (s *stressCheck) checkErr(err error, fnErr error) {
	switch {
	case err == nil, err == fnErr, errors.Is(err, ErrFull),
		err == context.Canceled, err == context.DeadlineExceeded:
	default:
		s.t.Errorf("unexpected error %v", err)
	}
}

func TestStressSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 4
		s := &stressCheck{t: t, limit: limit}
		var rejected, shed atomic.Int64
		b := mustNew(t, Config{Limit: limit, MaxQueue: 16, MaxWait: 3 * time.Millisecond,
			Reserve: map[policy.Priority]int{policy.PriorityCritical: 1},
			OnReject: func(_ context.Context, err *policy.RejectedError) {
				rejected.Add(1)
				if err.Reason == ReasonShed {
					shed.Add(1)
				}
			}})
		fnErr := errors.New("fn")
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 1))
				for range 100 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(6000))*time.Microsecond)
					ctx = policy.WithPriority(ctx, policy.Priority(r.IntN(3)-1))
					if r.IntN(4) == 0 { // an explicit cancel at a random moment
						time.AfterFunc(time.Duration(r.IntN(3000))*time.Microsecond, cancel)
					}
					mode, d := r.IntN(10), time.Duration(r.IntN(2000))*time.Microsecond
					func() {
						defer func() {
							if p := recover(); p != nil && p != "stress" {
								t.Errorf("panic %v", p)
							}
						}()
						err := b.Execute(ctx, func(ctx context.Context) error {
							s.enter()
							defer s.exit()
							time.Sleep(d)
							switch mode {
							case 0:
								panic("stress")
							case 1:
								return fnErr
							}
							return nil
						})
						s.checkErr(err, fnErr)
					}()
					cancel()
				}
			})
		}
		wg.Wait()
		checkCounts(t, b, 0, 0)
		if s.peak.Load() != limit || s.ran.Load() == 0 || rejected.Load() == 0 || shed.Load() == 0 {
			t.Errorf("peak %d, ran %d, rejected %d, shed %d: the stress did not stress", s.peak.Load(), s.ran.Load(), rejected.Load(), shed.Load())
		}
	})
}

func TestStressRealTime(t *testing.T) {
	const limit = 3
	s := &stressCheck{t: t, limit: limit}
	b := mustNew(t, Config{Limit: limit, MaxQueue: Unbounded, MaxWait: 200 * time.Microsecond})
	fnErr := errors.New("fn")
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 2))
			for range 300 {
				ctx, cancel := context.WithCancel(context.Background())
				if r.IntN(3) == 0 {
					spins := r.IntN(4)
					go func() {
						for range spins {
							runtime.Gosched()
						}
						cancel()
					}()
				}
				mode := r.IntN(8)
				func() {
					defer func() {
						if p := recover(); p != nil && p != "stress" {
							t.Errorf("panic %v", p)
						}
					}()
					err := b.Execute(ctx, func(ctx context.Context) error {
						s.enter()
						defer s.exit()
						runtime.Gosched()
						switch mode {
						case 0:
							panic("stress")
						case 1:
							return fnErr
						}
						return nil
					})
					s.checkErr(err, fnErr)
				}()
				cancel()
			}
		})
	}
	wg.Wait()
	checkCounts(t, b, 0, 0)
}

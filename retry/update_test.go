package retry

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func mustUpdate(t *testing.T, r *Retry, cfg Config) {
	t.Helper()
	if err := r.Update(cfg); err != nil {
		t.Fatalf("Update(%+v): %v", cfg, err)
	}
}

// A call in progress, in an attempt or in a wait, ends with the settings it
// started with; a call started after Update uses the new ones.
func TestUpdateCallInProgressKeepsItsSettings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := mustNew(t, Config{MaxAttempts: 3, InitialInterval: time.Second, Jitter: noJitter})
		inFn, release := make(chan struct{}), make(chan struct{})
		var attempting, waiting runResult
		var wg sync.WaitGroup
		wg.Go(func() {
			attempting = run(t.Context(), r, func(n int) error {
				if n == 1 {
					close(inFn)
					<-release
				}
				return errBoom
			})
		})
		wg.Go(func() { waiting = run(t.Context(), r, always(errBoom)) })
		<-inFn
		synctest.Wait() // one call in fn, the other in its first wait
		mustUpdate(t, r, Config{MaxAttempts: 2, InitialInterval: 3 * time.Second, MaxInterval: 3 * time.Second, Jitter: noJitter})
		close(release)
		wg.Wait()
		old := []time.Duration{time.Second, 2 * time.Second}
		for name, res := range map[string]runResult{"in fn": attempting, "waiting": waiting} {
			if res.calls != 3 || !equalDurations(res.waits, old) {
				t.Errorf("call %s at Update: %d attempts, waits %v; want 3, %v", name, res.calls, res.waits, old)
			}
		}
		res := run(t.Context(), r, always(errBoom))
		if want := []time.Duration{3 * time.Second}; res.calls != 2 || !equalDurations(res.waits, want) {
			t.Errorf("call after Update: %d attempts, waits %v; want 2, %v", res.calls, res.waits, want)
		}
	})
}

// MaxInterval caps the waits of the calls started after Update.
func TestUpdateMaxInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := mustNew(t, Config{MaxAttempts: 4, InitialInterval: time.Second, Jitter: noJitter})
		mustUpdate(t, r, Config{MaxAttempts: 4, InitialInterval: time.Second, MaxInterval: 1500 * time.Millisecond, Jitter: noJitter})
		res := run(t.Context(), r, always(errBoom))
		want := []time.Duration{time.Second, 1500 * time.Millisecond, 1500 * time.Millisecond}
		if !equalDurations(res.waits, want) {
			t.Errorf("waits = %v, want %v", res.waits, want)
		}
	})
}

// Jitter randomises the waits of the calls started after Update.
func TestUpdateJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := mustNew(t, Config{MaxAttempts: 2, InitialInterval: time.Second, Jitter: noJitter})
		mustUpdate(t, r, Config{MaxAttempts: 2, InitialInterval: time.Second, Jitter: 1})
		varied := false
		for range 20 {
			res := run(t.Context(), r, always(errBoom))
			varied = varied || res.waits[0] != time.Second
		}
		if !varied {
			t.Error("20 waits of exactly 1s after Update to Jitter 1")
		}
	})
}

// An invalid Config changes nothing and returns New's error for it.
func TestUpdateInvalidChangesNothing(t *testing.T) {
	for _, cfg := range []Config{
		{MaxAttempts: -1},
		{InitialInterval: -1},
		{MaxInterval: -1},
		{InitialInterval: time.Second, MaxInterval: time.Millisecond},
		{Jitter: 2},
		{Jitter: math.NaN()},
	} {
		synctest.Test(t, func(t *testing.T) {
			given := Config{Name: "x", MaxAttempts: 2, InitialInterval: time.Second, Jitter: noJitter, MeterProvider: noop.NewMeterProvider()}
			r := mustNew(t, given)
			cfg.Name, cfg.MeterProvider = given.Name, given.MeterProvider
			_, want := New(cfg)
			if err := r.Update(cfg); err == nil || want == nil || err.Error() != want.Error() {
				t.Fatalf("Update(%+v) = %v, want %v", cfg, err, want)
			}
			if got := r.Config(); !reflect.DeepEqual(got, given) {
				t.Errorf("Config() = %+v, want %+v", got, given)
			}
			res := run(t.Context(), r, always(errBoom))
			if res.calls != 2 || !equalDurations(res.waits, []time.Duration{time.Second}) {
				t.Errorf("%d attempts, waits %v; want 2, [1s]", res.calls, res.waits)
			}
		})
	}
}

// Config returns the Config as given, zero fields zero, and writing it back
// changes nothing.
func TestConfigAsGiven(t *testing.T) {
	mp := noop.NewMeterProvider()
	r := mustNew(t, Config{Name: "x", MeterProvider: mp})
	if got, want := r.Config(), (Config{Name: "x", MeterProvider: mp}); !reflect.DeepEqual(got, want) {
		t.Errorf("Config() after New = %+v, want %+v", got, want)
	}
	mustUpdate(t, r, Config{MaxAttempts: 5})
	want := Config{Name: "x", MeterProvider: mp, MaxAttempts: 5}
	if got := r.Config(); !reflect.DeepEqual(got, want) {
		t.Errorf("Config() after Update = %+v, want %+v", got, want)
	}
	mustUpdate(t, r, r.Config())
	if got := r.Config(); !reflect.DeepEqual(got, want) || MaxAttemptsOf(r) != 5 {
		t.Errorf("Config() written back = %+v (MaxAttempts %d), want %+v", got, MaxAttemptsOf(r), want)
	}
}

// Name, MeterProvider, Budget and the hooks stay New's; the Budget's balance
// survives.
func TestUpdateKeepsNewsFieldsAndBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b1, _ := NewBudget(BudgetConfig{Ratio: 10, MinPerSecond: -1})
		b2, _ := NewBudget(BudgetConfig{Ratio: 10, MinPerSecond: -1})
		mp := noop.NewMeterProvider()
		var asked, told, built atomic.Int32
		r := mustNew(t, Config{
			Name:          "a",
			MaxAttempts:   2,
			MeterProvider: mp,
			Budget:        b1,
			ShouldRetry:   func(error) bool { asked.Add(1); return true },
			NewSchedule:   func() backoff.BackOff { built.Add(1); return zeroWaits() },
			OnRetry:       func(context.Context, int, error, time.Duration) { told.Add(1) },
		})
		mustUpdate(t, r, Config{
			Name:          "b",
			MaxAttempts:   3,
			MeterProvider: sdkmetric.NewMeterProvider(),
			Budget:        b2,
			ShouldRetry:   func(error) bool { return false },
			OnRetry:       nil,
		})
		got := r.Config()
		if got.Name != "a" || got.MeterProvider != mp || got.Budget != b1 || got.MaxAttempts != 3 ||
			got.ShouldRetry == nil || got.NewSchedule == nil || got.OnRetry == nil {
			t.Fatalf("Config() = %+v, want New's Name, MeterProvider, Budget and hooks, MaxAttempts 3", got)
		}
		err := r.Execute(t.Context(), func(context.Context) error { return errBoom })
		var e *ExhaustedError
		if !errors.As(err, &e) || e.Name != "a" || e.Attempts != 3 {
			t.Fatalf("err = %v, want exhausted by %q after 3 attempts", err, "a")
		}
		if asked.Load() != 3 || told.Load() != 2 || built.Load() != 1 {
			t.Errorf("ShouldRetry %d, OnRetry %d, NewSchedule %d calls; want 3, 2, 1", asked.Load(), told.Load(), built.Load())
		}
		// The call deposited 10 in New's Budget and withdrew 2 retries.
		if a1, a2 := b1.Available(), b2.Available(); a1 != 8 || a2 != 0 {
			t.Errorf("balances %v, %v; want 8 in New's Budget, 0 in Update's", a1, a2)
		}
	})
}

// Calls from many goroutines while Update runs in a loop with valid and
// invalid Configs: each call keeps one Config throughout, invalid Updates
// change nothing, and Config() is always the last valid one.
func TestUpdateConcurrent(t *testing.T) {
	// A valid Config k has MaxAttempts k and every wait k ns: a call that
	// mixed two would show it.
	valid := func(k int) Config {
		d := time.Duration(k)
		return Config{MaxAttempts: k, InitialInterval: d, MaxInterval: d, Jitter: noJitter}
	}
	type waitsKey struct{}
	mp := noop.NewMeterProvider()
	r := mustNew(t, Config{
		Name:          "c",
		MaxAttempts:   1,
		MeterProvider: mp,
		OnRetry: func(ctx context.Context, _ int, _ error, wait time.Duration) {
			w := ctx.Value(waitsKey{}).(*[]time.Duration)
			*w = append(*w, wait)
		},
	})
	mustUpdate(t, r, valid(1))
	stop := make(chan struct{})
	var calls atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				var waits []time.Duration
				ctx := context.WithValue(context.Background(), waitsKey{}, &waits)
				var e *ExhaustedError
				if err := r.Execute(ctx, func(context.Context) error { return errBoom }); !errors.As(err, &e) {
					t.Errorf("err = %v, want exhausted", err)
					return
				}
				k := e.Attempts
				if len(waits) != k-1 {
					t.Errorf("%d attempts after %d waits", k, len(waits))
				}
				for _, w := range waits {
					if w != time.Duration(k) {
						t.Errorf("%d attempts with waits %v: a mix of Configs", k, waits)
						break
					}
				}
				if _, err := New(r.Config()); err != nil {
					t.Errorf("Config() is invalid: %v", err)
				}
				calls.Add(1)
			}
		})
	}
	last := valid(1)
	// Update until the calls have seen many Updates.
	for i := 0; i < 2000 || calls.Load() < 1000 && !t.Failed(); i++ {
		cfg := valid(1 + rand.IntN(5))
		switch rand.IntN(3) {
		case 0:
			cfg.Jitter = 2
		case 1:
			cfg.MaxInterval = cfg.InitialInterval - 1
		}
		err := r.Update(cfg)
		if err == nil {
			last = cfg
		}
		want := last
		want.Name, want.MeterProvider = "c", mp
		got := r.Config()
		if got.OnRetry == nil {
			t.Fatal("Config().OnRetry is nil")
		}
		got.OnRetry = nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Config() = %+v, want %+v (Update: %v)", got, want, err)
		}
	}
	close(stop)
	wg.Wait()
}

package ratelimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
)

func mustUpdate(t *testing.T, l *ratelimit.Limiter, cfg ratelimit.Config) {
	t.Helper()
	if err := l.Update(cfg); err != nil {
		t.Fatalf("Update(%+v): %v", cfg, err)
	}
}

// ranAfter runs one attempt of ctx through l and returns how long it waited
// to be admitted.
func ranAfter(t *testing.T, ctx context.Context, l *ratelimit.Limiter) time.Duration {
	t.Helper()
	start := time.Now()
	var waited time.Duration
	if err := l.Execute(ctx, func(context.Context) error { waited = time.Since(start); return nil }); err != nil {
		t.Fatal(err)
	}
	return waited
}

// A rate changed keeps the tokens already spent: the bucket emptied before
// Update refills at the new rate, and a larger burst adds no tokens.
func TestUpdateRateKeepsTokensSpent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{RequestsPerSecond: 1, Burst: 2})
		ranAfter(t, t.Context(), l)
		ranAfter(t, t.Context(), l)
		mustUpdate(t, l, ratelimit.Config{RequestsPerSecond: 2, Burst: 5})
		if d := ranAfter(t, t.Context(), l); d != 500*time.Millisecond {
			t.Errorf("after Update, admitted in %v, want 500ms", d)
		}

		l = newLimiter(t, ratelimit.Config{TokensPerMinute: 60, TokenBurst: 10})
		ranAfter(t, ratelimit.WithCost(t.Context(), 10), l)
		mustUpdate(t, l, ratelimit.Config{TokensPerMinute: 120, TokenBurst: 20})
		if d := ranAfter(t, ratelimit.WithCost(t.Context(), 4), l); d != 2*time.Second {
			t.Errorf("after Update, 4 tokens in %v, want 2s", d)
		}
	})
}

// A rate turned on starts with a full burst; a rate turned off admits at
// once.
func TestUpdateRateOnAndOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		for range 2 {
			mustUpdate(t, l, ratelimit.Config{RequestsPerSecond: 1, Burst: 1})
			if a, b := ranAfter(t, t.Context(), l), ranAfter(t, t.Context(), l); a != 0 || b != time.Second {
				t.Errorf("rate turned on: admitted in %v, %v; want 0, 1s", a, b)
			}
			ranAfter(t, t.Context(), l) // the bucket is empty
			mustUpdate(t, l, ratelimit.Config{})
			for range 3 {
				if d := ranAfter(t, t.Context(), l); d != 0 {
					t.Fatalf("rate turned off: admitted in %v", d)
				}
			}
		}
		mustUpdate(t, l, ratelimit.Config{TokensPerMinute: 60, TokenBurst: 10})
		ctx := ratelimit.WithCost(t.Context(), 10)
		if a, b := ranAfter(t, ctx, l), ranAfter(t, ctx, l); a != 0 || b != 10*time.Second {
			t.Errorf("tokens turned on: admitted in %v, %v; want 0, 10s", a, b)
		}
		mustUpdate(t, l, ratelimit.Config{})
		if d := ranAfter(t, ctx, l); d != 0 {
			t.Errorf("tokens turned off: admitted in %v", d)
		}
	})
}

// MaxHold caps the holds set after Update; a hold already on keeps its end.
func TestUpdateMaxHoldCapsLaterHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{MaxHold: 10 * time.Second})
		l.HoldFor(10 * time.Second)
		mustUpdate(t, l, ratelimit.Config{MaxHold: time.Second})
		if h := l.Held(); h != 10*time.Second {
			t.Errorf("hold on at Update: Held = %v, want 10s", h)
		}
		time.Sleep(10 * time.Second)
		l.HoldFor(30 * time.Second)
		if h := l.Held(); h != time.Second {
			t.Errorf("hold set after Update: Held = %v, want 1s", h)
		}
	})
}

// MaxWait bounds the attempts that enter after Update; an attempt already
// waiting keeps its bound.
func TestUpdateMaxWaitForLaterAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{MaxHold: 10 * time.Second})
		l.HoldFor(5 * time.Second)
		var waiting time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			waiting = ranAfter(t, t.Context(), l)
		}()
		synctest.Wait()
		mustUpdate(t, l, ratelimit.Config{MaxHold: 10 * time.Second, MaxWait: time.Second})
		if got := l.MaxWait(); got != time.Second {
			t.Errorf("MaxWait() = %v, want 1s", got)
		}
		if err := l.Execute(t.Context(), ok); !errors.Is(err, ratelimit.ErrLimited) {
			t.Errorf("attempt after Update = %v, want ErrLimited", err)
		}
		l.HoldFor(8 * time.Second) // within the waiting attempt's 10s
		<-done
		if waiting != 8*time.Second {
			t.Errorf("attempt waiting at Update admitted in %v, want 8s", waiting)
		}
		mustUpdate(t, l, ratelimit.Config{MaxHold: 2 * time.Second})
		if got := l.MaxWait(); got != 2*time.Second {
			t.Errorf("MaxWait() = %v, want MaxHold's 2s", got)
		}
	})
}

// The gate after a hold survives an Update: an attempt waits behind the
// probe as it did before.
func TestUpdateKeepsTheGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		l.HoldFor(time.Second)
		time.Sleep(time.Second)
		release := make(chan struct{})
		var ran atomic.Int32
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := l.Execute(t.Context(), func(context.Context) error { <-release; return nil }); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait() // the probe is out
		mustUpdate(t, l, ratelimit.Config{MaxHold: 30 * time.Second, RequestsPerSecond: 1000})
		wg.Go(func() {
			if err := l.Execute(t.Context(), func(context.Context) error { ran.Add(1); return nil }); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait()
		if ran.Load() != 0 {
			t.Error("an attempt passed the gate while the probe was out")
		}
		close(release)
		wg.Wait()
		if ran.Load() != 1 {
			t.Error("the attempt behind the gate did not run")
		}
	})
}

// An invalid Config changes nothing and returns New's error for it.
func TestUpdateInvalidChangesNothing(t *testing.T) {
	for _, cfg := range []ratelimit.Config{
		{RequestsPerSecond: -1},
		{RequestsPerSecond: nan()},
		{Burst: -1},
		{TokensPerMinute: -2},
		{TokenBurst: -1},
		{MaxHold: -1},
		{MaxWait: -1},
	} {
		synctest.Test(t, func(t *testing.T) {
			given := ratelimit.Config{Name: "x", RequestsPerSecond: 1, Burst: 1, MaxHold: 5 * time.Second}
			l := newLimiter(t, given)
			cfg.Name = given.Name
			_, want := ratelimit.New(cfg)
			if err := l.Update(cfg); err == nil || want == nil || err.Error() != want.Error() {
				t.Fatalf("Update(%+v) = %v, want %v", cfg, err, want)
			}
			if got := l.Config(); !reflect.DeepEqual(got, given) {
				t.Errorf("Config() = %+v, want %+v", got, given)
			}
			if a, b := ranAfter(t, t.Context(), l), ranAfter(t, t.Context(), l); a != 0 || b != time.Second {
				t.Errorf("admitted in %v, %v; want 0, 1s", a, b)
			}
		})
	}
}

// Config returns the Config as given, with New's Name, MeterProvider and
// OnReject; writing it back changes nothing.
func TestConfigAsGiven(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp := noop.NewMeterProvider()
		var rejected atomic.Int32
		l := newLimiter(t, ratelimit.Config{
			Name:          "a",
			MeterProvider: mp,
			OnReject:      func(context.Context, *policy.RejectedError) { rejected.Add(1) },
		})
		if got := l.Config(); got.Name != "a" || got.MeterProvider != mp || got.OnReject == nil || got.MaxHold != 0 || got.MaxWait != 0 {
			t.Errorf("Config() after New = %+v", got)
		}
		mustUpdate(t, l, ratelimit.Config{Name: "b", MeterProvider: sdkmetric.NewMeterProvider(), MaxWait: time.Second})
		got := l.Config()
		if got.Name != "a" || got.MeterProvider != mp || got.OnReject == nil || got.MaxHold != 0 || got.MaxWait != time.Second {
			t.Errorf("Config() after Update = %+v, want New's Name, MeterProvider and OnReject, MaxWait 1s, MaxHold 0", got)
		}
		mustUpdate(t, l, l.Config())
		if l.MaxWait() != time.Second || l.Config().MaxHold != 0 {
			t.Errorf("Config() written back: MaxWait() %v, MaxHold %v", l.MaxWait(), l.Config().MaxHold)
		}
		l.HoldFor(5 * time.Second)
		rej, _ := errors.AsType[*policy.RejectedError](l.Execute(t.Context(), ok))
		if rej == nil || rej.Name != "a" || rejected.Load() != 1 {
			t.Errorf("rejection %v, OnReject called %d times; want New's Name and OnReject", rej, rejected.Load())
		}
	})
}

// randomConfig returns a valid Config, or with odds of one in three an
// invalid one.
func randomConfig() (ratelimit.Config, bool) {
	cfg := ratelimit.Config{
		Burst:      rand.IntN(5),
		TokenBurst: rand.IntN(50),
		MaxHold:    time.Duration(rand.IntN(1000)) * time.Millisecond,
		MaxWait:    time.Duration(rand.IntN(200)) * time.Millisecond,
	}
	if rand.IntN(4) > 0 {
		cfg.RequestsPerSecond = 1 + rand.Float64()*100
	}
	if rand.IntN(4) > 0 {
		cfg.TokensPerMinute = rand.Float64() * 60000
	}
	switch rand.IntN(9) {
	case 0:
		cfg.Burst = -1
	case 1:
		cfg.TokensPerMinute = -1
	case 2:
		cfg.MaxWait = -1
	default:
		return cfg, true
	}
	return cfg, false
}

// Attempts from many goroutines, holds, and Update in a loop with valid and
// invalid Configs: every attempt ends admitted or limited, invalid Updates
// change nothing, and Config() is always the last valid one.
func TestUpdateConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{RequestsPerSecond: 100, Burst: 5, MaxWait: 100 * time.Millisecond})
		const goroutines, calls = 8, 200
		var ran, limited atomic.Int64
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range calls {
					ctx := ratelimit.WithCost(context.Background(), rand.IntN(30))
					err := l.Execute(ctx, func(context.Context) error { ran.Add(1); return nil })
					switch {
					case err == nil:
					case errors.Is(err, ratelimit.ErrLimited):
						limited.Add(1)
					default:
						t.Errorf("Execute = %v", err)
					}
					if _, err := ratelimit.New(l.Config()); err != nil {
						t.Errorf("Config() is invalid: %v", err)
					}
					if rand.IntN(50) == 0 {
						l.HoldFor(time.Duration(rand.IntN(300)) * time.Millisecond)
					}
				}
			})
		}
		last := l.Config()
		for range 500 {
			cfg, valid := randomConfig()
			if err := l.Update(cfg); (err == nil) != valid {
				t.Fatalf("Update(%+v) = %v", cfg, err)
			}
			if valid {
				last = cfg
			}
			if got := l.Config(); !reflect.DeepEqual(got, last) {
				t.Fatalf("Config() = %+v, want %+v", got, last)
			}
			time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
		}
		wg.Wait()
		if n := ran.Load() + limited.Load(); n != goroutines*calls {
			t.Errorf("%d attempts admitted, %d limited; want %d in all", ran.Load(), limited.Load(), goroutines*calls)
		}
		if ran.Load() == 0 {
			t.Error("no attempt admitted")
		}
	})
}

package retry

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"pgregory.net/rapid"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

func mustBudget(t testing.TB, cfg BudgetConfig) *Budget {
	t.Helper()
	b, err := NewBudget(cfg)
	if err != nil {
		t.Fatalf("NewBudget(%+v): %v", cfg, err)
	}
	return b
}

// mustBudgetWindow builds a Budget whose deposits fade with the time
// constant window.
func mustBudgetWindow(t testing.TB, cfg BudgetConfig, window time.Duration) *Budget {
	t.Helper()
	b, err := newBudget(cfg, window)
	if err != nil {
		t.Fatalf("newBudget(%+v, %v): %v", cfg, window, err)
	}
	return b
}

// noMinimum, as BudgetConfig.MinPerSecond, grants no retries beyond those
// the calls pay for.
const noMinimum = -1.0

// noJitter, as Config.Jitter, turns off the randomisation of waits.
const noJitter = -1.0

func TestBudgetConfigValidation(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name  string
		cfg   BudgetConfig
		field string // "" : valid
		msg   string
	}{
		{"zero", BudgetConfig{}, "", ""},
		{"Ratio 3", BudgetConfig{Ratio: 3}, "", ""},
		{"Ratio tiny", BudgetConfig{Ratio: 1e-9}, "", ""},
		{"MinPerSecond -1", BudgetConfig{MinPerSecond: -1}, "", ""},
		{"MinPerSecond -Inf", BudgetConfig{MinPerSecond: math.Inf(-1)}, "", ""},
		{"Ratio negative", BudgetConfig{Ratio: -0.2}, "BudgetConfig.Ratio", "must be a finite number > 0, got -0.2"},
		{"Ratio NaN", BudgetConfig{Ratio: nan}, "BudgetConfig.Ratio", "must be a finite number > 0, got NaN"},
		{"Ratio +Inf", BudgetConfig{Ratio: math.Inf(1)}, "BudgetConfig.Ratio", "must be a finite number > 0, got +Inf"},
		{"MinPerSecond NaN", BudgetConfig{MinPerSecond: nan}, "BudgetConfig.MinPerSecond", "must be finite, got NaN"},
		{"MinPerSecond +Inf", BudgetConfig{MinPerSecond: math.Inf(1)}, "BudgetConfig.MinPerSecond", "must be finite, got +Inf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBudget(tt.cfg)
			if tt.field == "" {
				if err != nil || b == nil {
					t.Errorf("NewBudget = %v, %v; want valid", b, err)
				}
				return
			}
			if err == nil || b != nil {
				t.Fatalf("NewBudget = %v, %v; want an error naming %s", b, err, tt.field)
			}
			if want := "retry: " + tt.field + " " + tt.msg; err.Error() != want {
				t.Errorf("err = %q, want %q", err, want)
			}
		})
	}
}

// A new Budget holds its reserve, Window x MinPerSecond; with noMinimum it
// holds nothing and grants nothing until calls pay.
func TestBudgetStartsAtReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBudget(t, BudgetConfig{})
		if got := b.Available(); got != 100 {
			t.Errorf("Available = %v, want 100 (10s x 10/s)", got)
		}
		none := mustBudget(t, BudgetConfig{MinPerSecond: noMinimum})
		if none.Available() != 0 || none.TryWithdraw() {
			t.Errorf("noMinimum: Available = %v, TryWithdraw granted; want nothing", none.Available())
		}
		// Five calls at Ratio 0.2 pay for one retry, four do not.
		for range 4 {
			none.Deposit()
		}
		if none.TryWithdraw() {
			t.Errorf("4 deposits at 0.2 granted a retry")
		}
		none.Deposit()
		if !none.TryWithdraw() {
			t.Errorf("5 deposits at 0.2 refused a retry")
		}
		if got := none.Available(); got < 0 || got > 1e-9 {
			t.Errorf("Available after the withdrawal = %v, want 0", got)
		}
	})
}

// Under steady traffic with no retries the balance settles at
// (Ratio x rate + MinPerSecond) x Window, what Finagle's window allows;
// deposits then fade with time constant Window.
func TestBudgetSteadyStateAndDecay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBudget(t, BudgetConfig{})
		// 100 calls a second for 100 s (10 time constants).
		for i := range 10000 {
			b.Deposit()
			time.Sleep(10 * time.Millisecond)
			if (i+1)%500 == 0 {
				b.Available() // a few updates along the way, as retries would
			}
		}
		want := (0.2*100 + 10) * 10.0
		if got := b.Available(); math.Abs(got-want) > 0.01*want {
			t.Errorf("steady balance = %v, want about %v", got, want)
		}
		// No calls for one Window: the deposits fall to 1/e, the reserve
		// stays.
		time.Sleep(10 * time.Second)
		want = 200/math.E + 100
		if got := b.Available(); math.Abs(got-want) > 0.01*want {
			t.Errorf("after a quiet Window = %v, want about %v", got, want)
		}
	})
}

// Spent, the floor refills at MinPerSecond retries a second.
func TestBudgetFloorRefills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBudget(t, BudgetConfig{MinPerSecond: 5})
		n := 0
		for b.TryWithdraw() {
			n++
		}
		if n != 50 {
			t.Errorf("reserve granted %d retries, want 50", n)
		}
		time.Sleep(time.Second)
		// 50 x (1 - e^-0.1) = 4.76: four whole retries.
		n = 0
		for b.TryWithdraw() {
			n++
		}
		if n != 4 {
			t.Errorf("after 1s the floor granted %d retries, want 4", n)
		}
		if got := b.Available(); got < 0 {
			t.Errorf("Available = %v < 0", got)
		}
	})
}

// A retry the budget refuses ends the call at once: an ExhaustedError with
// Reason budget, wrapping fn's last error, no wait, no OnRetry, counted as
// an exhaustion with reason "budget" and not as an attempt.
func TestBudgetRefusesRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		b := mustBudget(t, BudgetConfig{Ratio: 0.5, MinPerSecond: noMinimum})
		var onRetry int
		r := mustNew(t, Config{Name: "llm", MaxAttempts: 5, Budget: b, MeterProvider: mp, Jitter: noJitter,
			OnRetry: func(context.Context, int, error, time.Duration) { onRetry++ }})
		// The first call deposits half a retry: not enough.
		start := time.Now()
		last := errors.New("503")
		res := run(t.Context(), r, always(last))
		if res.calls != 1 || time.Since(start) != 0 || onRetry != 0 {
			t.Errorf("calls = %d, waited %v, OnRetry %d times; want 1 attempt, no wait, no OnRetry", res.calls, time.Since(start), onRetry)
		}
		var ee *ExhaustedError
		if !errors.As(res.err, &ee) || ee.Reason != ReasonBudget || ee.Attempts != 1 || ee.Err != last || ee.Name != "llm" {
			t.Fatalf("err = %#v; want an ExhaustedError, Reason budget, Attempts 1, Err the last error", res.err)
		}
		if !errors.Is(res.err, ErrExhausted) || !errors.Is(res.err, last) {
			t.Errorf("err = %v; want ErrExhausted and the last error", res.err)
		}
		if want := `retry "llm": gave up after 1 attempt: the retry budget is spent: 503`; res.err.Error() != want {
			t.Errorf("message = %q, want %q", res.err, want)
		}
		// The second call brings the balance to one retry: attempt 2 runs,
		// attempt 3 is refused.
		res = run(t.Context(), r, always(last))
		if res.calls != 2 || onRetry != 1 || !errors.As(res.err, &ee) || ee.Reason != ReasonBudget || ee.Attempts != 2 {
			t.Errorf("calls = %d, OnRetry %d, err %v; want 2 attempts, one retry, then refused", res.calls, onRetry, res.err)
		}
		kind, name := telemetry.KeyKind.String("retry"), telemetry.KeyName.String("llm")
		got := sums(t, reader)
		if v := got[telemetry.MetricExhausted][attribute.NewSet(kind, name, telemetry.KeyRetryReason.String(ReasonBudget))]; v != 2 || len(got[telemetry.MetricExhausted]) != 1 {
			t.Errorf("exhausted = %v, want 2 with reason budget", got[telemetry.MetricExhausted])
		}
		if v := got[telemetry.MetricAttempts][attribute.NewSet(kind, name)]; v != 1 {
			t.Errorf("attempts = %v, want 1", got[telemetry.MetricAttempts])
		}
	})
}

// The budget is asked last: a call that ends for another reason (out of
// attempts, permanent, rejected, ShouldRetry, deadline) or succeeds spends
// nothing.
func TestBudgetAskedLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBudget(t, BudgetConfig{Ratio: 1, MinPerSecond: noMinimum})
		r := mustNew(t, Config{MaxAttempts: 2, Budget: b, NewSchedule: zeroWaits,
			ShouldRetry: func(err error) bool { return err.Error() != "fatal" }})
		ctx := t.Context()
		dctx, cancel := context.WithTimeout(ctx, time.Nanosecond)
		defer cancel()
		slow := mustNew(t, Config{MaxAttempts: 2, Budget: b, InitialInterval: time.Second})
		for _, c := range []struct {
			r   *Retry
			ctx context.Context
			fn  func(int) error
		}{
			{r, ctx, always(nil)},
			{r, ctx, always(policy.Permanent(errBoom))},
			{r, ctx, always(policy.NewRejectedError("breaker", "b", "open", nil))},
			{r, ctx, always(errors.New("fatal"))},
			{slow, dctx, always(errBoom)},
			{r, ctx, func(n int) error { // retried once, then out of attempts
				return errBoom
			}},
		} {
			run(c.ctx, c.r, c.fn)
		}
		// Six calls deposited six retries; one was spent.
		if got := b.Available(); math.Abs(got-5) > 1e-9 {
			t.Errorf("Available = %v, want 5", got)
		}
	})
}

// Every exhaustion is counted under its reason.
func TestExhaustedReasonAttribute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		ctx := t.Context()
		r := mustNew(t, Config{Name: "x", MaxAttempts: 2, MeterProvider: mp, InitialInterval: time.Second, MaxInterval: time.Second})
		run(ctx, r, always(errBoom))                    // max_attempts
		run(ctx, r, always(retryAfterErr{time.Minute})) // retry_after
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		run(dctx, r, always(errBoom)) // deadline
		cancel()
		run(ctx, r, func(n int) error { // rejected
			if n == 1 {
				return errBoom
			}
			return policy.NewRejectedError("breaker", "b", "open", nil)
		})
		stopped := mustNew(t, Config{Name: "x", MeterProvider: mp,
			NewSchedule: func() backoff.BackOff { return &backoff.StopBackOff{} }})
		run(ctx, stopped, always(errBoom)) // stopped
		spent := mustNew(t, Config{Name: "x", MeterProvider: mp, Budget: mustBudget(t, BudgetConfig{MinPerSecond: noMinimum})})
		run(ctx, spent, always(errBoom)) // budget
		got := sums(t, reader)[telemetry.MetricExhausted]
		for _, reason := range reasons {
			set := attribute.NewSet(telemetry.KeyKind.String("retry"), telemetry.KeyName.String("x"), telemetry.KeyRetryReason.String(reason))
			if got[set] != 1 {
				t.Errorf("exhausted{reason=%s} = %d, want 1", reason, got[set])
			}
		}
		if len(got) != len(reasons) {
			t.Errorf("exhausted has %d series, want %d: %v", len(got), len(reasons), got)
		}
	})
}

// One Budget shared by two Retries: the calls of one pay for the retries
// of the other.
func TestBudgetShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBudget(t, BudgetConfig{Ratio: 0.1, MinPerSecond: noMinimum})
		healthy := mustNew(t, Config{Budget: b})
		failing := mustNew(t, Config{Budget: b, NewSchedule: zeroWaits})
		if res := run(t.Context(), failing, always(errBoom)); res.calls != 1 {
			t.Fatalf("calls = %d before any deposit from the other Retry, want 1", res.calls)
		}
		for range 20 {
			run(t.Context(), healthy, always(nil))
		}
		// 21 calls x 0.1 = 2.1: the failing call gets its 2 retries.
		if res := run(t.Context(), failing, always(errBoom)); res.calls != 3 || !errors.Is(res.err, ErrExhausted) {
			t.Errorf("calls = %d, err %v; want 3 attempts paid by the other Retry's calls", res.calls, res.err)
		}
	})
}

// A call that succeeds at once deposits and allocates nothing more than
// without a budget.
func TestBudgetSuccessPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBudget(t, BudgetConfig{})
		r := mustNew(t, Config{Budget: b})
		plain := mustNew(t, Config{})
		ctx := context.Background()
		fn := func(context.Context) error { return nil }
		with := testing.AllocsPerRun(100, func() { _ = r.Execute(ctx, fn) })
		without := testing.AllocsPerRun(100, func() { _ = plain.Execute(ctx, fn) })
		if with != without {
			t.Errorf("allocs with a budget = %v, without = %v", with, without)
		}
		// AllocsPerRun runs once more to warm up: 101 deposits of 0.2.
		if got, want := b.Available(), 100+101*0.2; math.Abs(got-want) > 1e-9 {
			t.Errorf("Available = %v, want %v", got, want)
		}
	})
}

// The outage the issue describes, in miniature: every attempt fails, one
// call per millisecond, MaxAttempts 3; attempts per call settle at
// 1 + Ratio + MinPerSecond/rate = 1.21.
func TestBudgetBoundsOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBudget(t, BudgetConfig{})
		r := mustNew(t, Config{Budget: b, InitialInterval: 50 * time.Millisecond, Jitter: noJitter})
		var wg sync.WaitGroup
		var calls, attempts atomic.Int64
		for i := range 40000 {
			measured := i >= 20000 // after 20 s of warm-up
			wg.Go(func() {
				var n int64
				_ = r.Execute(context.Background(), func(ctx context.Context) error {
					n++
					time.Sleep(5 * time.Millisecond)
					return errBoom
				})
				if measured {
					calls.Add(1)
					attempts.Add(n)
				}
			})
			time.Sleep(time.Millisecond)
		}
		wg.Wait()
		amp := float64(attempts.Load()) / float64(calls.Load())
		if amp > 1.25 || amp < 1.15 {
			t.Errorf("attempts per call = %.3f, want about 1.21", amp)
		}
	})
}

// TestBudgetProperties drives Budgets of random configurations with random
// steps (calls through Retries sharing the budget, which fail, succeed,
// panic or are canceled at random; direct deposits and withdrawals; pauses)
// in synctest bubbles, and checks after every step that the balance is
// never negative and that the retries granted never exceed what was paid
// for: the reserve, Ratio per deposit and MinPerSecond per second elapsed.
// Every call makes at most MaxAttempts attempts, and every attempt that
// starts ends once.
func TestBudgetProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			cfg := BudgetConfig{
				Ratio:        rapid.SampledFrom([]float64{0, 0.01, 0.2, 0.5, 2}).Draw(rt, "ratio"),
				MinPerSecond: rapid.SampledFrom([]float64{0, noMinimum, 0.5, 3}).Draw(rt, "minPerSecond"),
			}
			window := time.Duration(rapid.SampledFrom([]int{1, 50, 1000, 10000}).Draw(rt, "windowMs")) * time.Millisecond
			b, err := newBudget(cfg, window)
			if err != nil {
				rt.Fatalf("NewBudget(%+v): %v", cfg, err)
			}
			s := b.s
			start := time.Now()
			var (
				deposits, grants atomic.Int64
				started, ended   atomic.Int64
				overrun          atomic.Int64
				wg               sync.WaitGroup
			)
			onRetry := func(context.Context, int, error, time.Duration) { grants.Add(1) }
			var retries []*Retry
			for range rapid.IntRange(1, 3).Draw(rt, "retries") {
				r, err := New(Config{
					MaxAttempts:     rapid.IntRange(1, 6).Draw(rt, "maxAttempts"),
					InitialInterval: time.Duration(rapid.IntRange(1, 20).Draw(rt, "initialMs")) * time.Millisecond,
					MaxInterval:     time.Second,
					Budget:          b,
					OnRetry:         onRetry,
					MeterProvider:   noop.NewMeterProvider(),
				})
				if err != nil {
					rt.Fatal(err)
				}
				retries = append(retries, r)
			}
			check := func() {
				b.mu.Lock()
				bal := b.balance
				b.mu.Unlock()
				if bal < 0 || math.IsNaN(bal) {
					rt.Fatalf("balance = %v", bal)
				}
				paid := window.Seconds()*s.MinPerSecond + s.Ratio*float64(deposits.Load()) + s.MinPerSecond*time.Since(start).Seconds()
				if g := float64(grants.Load()); g > paid+1e-6 {
					rt.Fatalf("granted %v retries, paid for %v", g, paid)
				}
				if overrun.Load() != 0 {
					rt.Fatalf("a call made more than MaxAttempts attempts")
				}
			}
			steps := rapid.IntRange(1, 60).Draw(rt, "steps")
			for range steps {
				switch rapid.IntRange(0, 4).Draw(rt, "op") {
				case 0, 1: // a call, in the background
					r := rapid.SampledFrom(retries).Draw(rt, "retry")
					failP := rapid.Float64Range(0, 1).Draw(rt, "failP")
					panicAt := rapid.IntRange(0, 8).Draw(rt, "panicAt") // 0: never
					cancelAfter := time.Duration(rapid.IntRange(0, 100).Draw(rt, "cancelAfterMs")) * time.Millisecond
					lat := time.Duration(rapid.IntRange(0, 10).Draw(rt, "latencyMs")) * time.Millisecond
					seed := rapid.Uint64().Draw(rt, "seed")
					deposits.Add(1)
					wg.Go(func() {
						ctx, cancel := context.WithCancel(context.Background())
						defer cancel()
						if cancelAfter > 0 {
							stop := time.AfterFunc(cancelAfter, cancel)
							defer stop.Stop()
						}
						defer func() { _ = recover() }()
						var n int
						_ = r.Execute(ctx, func(ctx context.Context) error {
							started.Add(1)
							defer ended.Add(1)
							n++
							if n > MaxAttemptsOf(r) {
								overrun.Add(1)
							}
							if n == panicAt {
								panic("fn panicked")
							}
							time.Sleep(lat)
							seed = seed*6364136223846793005 + 1442695040888963407
							if float64(seed>>11)/(1<<53) < failP {
								return errBoom
							}
							return nil
						})
					})
				case 2:
					for range rapid.IntRange(1, 50).Draw(rt, "deposits") {
						b.Deposit()
						deposits.Add(1)
					}
				case 3: // a burst of retries made outside a Retry
					for range rapid.IntRange(1, 200).Draw(rt, "withdrawals") {
						if b.TryWithdraw() {
							grants.Add(1)
						}
					}
				case 4:
					time.Sleep(time.Duration(rapid.IntRange(0, 2000).Draw(rt, "sleepMs")) * time.Millisecond)
				}
				check()
			}
			wg.Wait()
			check()
			if started.Load() != ended.Load() {
				rt.Fatalf("%d attempts started, %d ended", started.Load(), ended.Load())
			}
			if got := b.Available(); got < 0 {
				rt.Fatalf("Available = %v", got)
			}
		})
	})
}

// Absurd but valid settings never make the balance infinite or NaN.
func TestBudgetHugeSettings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBudgetWindow(t, BudgetConfig{Ratio: math.MaxFloat64, MinPerSecond: math.MaxFloat64}, time.Duration(math.MaxInt64))
		for range 3 {
			b.Deposit()
		}
		for _, d := range []time.Duration{0, time.Nanosecond, time.Hour, 1000 * time.Hour} {
			time.Sleep(d)
			if !b.TryWithdraw() {
				t.Errorf("refused a withdrawal")
			}
			if a := b.Available(); math.IsNaN(a) || math.IsInf(a, 0) || a < 0 {
				t.Fatalf("Available = %v after %v", a, d)
			}
		}
		small := mustBudgetWindow(t, BudgetConfig{Ratio: math.MaxFloat64}, time.Millisecond)
		small.Deposit()
		small.Deposit()
		time.Sleep(1000 * time.Hour) // the deposits decay to nothing: exp(-3.6e9)
		if a := small.Available(); math.IsNaN(a) || math.IsInf(a, 0) || a < 0 {
			t.Fatalf("Available = %v", a)
		}
	})
}

// Deposits from many goroutines at once are all counted, and all pay:
// with no time passed, a Ratio of 1 and no floor, each deposit is one
// whole retry.
func TestBudgetConcurrentDeposits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBudget(t, BudgetConfig{Ratio: 1, MinPerSecond: noMinimum})
		const goroutines, each = 16, 2000
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range each {
					b.Deposit()
				}
			})
		}
		wg.Wait()
		if got := b.Available(); got != goroutines*each {
			t.Errorf("Available = %v, want %d", got, goroutines*each)
		}
		for range goroutines * each {
			if !b.TryWithdraw() {
				t.Fatal("TryWithdraw refused a retry that was paid for")
			}
		}
		if b.TryWithdraw() {
			t.Error("TryWithdraw granted a retry nothing paid for")
		}
	})
}

package hedge

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"pgregory.net/rapid"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

func mustHedge(t testing.TB, cfg Config) *Hedge {
	t.Helper()
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = noop.NewMeterProvider()
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return h
}

// mustHedgeWindow builds a Hedge that learns its delay from the last n
// latencies.
func mustHedgeWindow(t testing.TB, cfg Config, n int) *Hedge {
	t.Helper()
	h := mustHedge(t, cfg)
	h.est = newDelayEstimator(h.s.Quantile, h.s.Delay, n)
	return h
}

func TestConfigValidation(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name  string
		cfg   Config
		field string
		msg   string
	}{
		{"zero", Config{}, "", ""},
		{"fixed", Config{Delay: time.Millisecond}, "", ""},
		{"quantile with a least delay", Config{Delay: time.Second, Quantile: 0.5}, "", ""},
		{"MaxHedges limit", Config{MaxHedges: maxHedgesLimit}, "", ""},
		{"MaxHedges -1", Config{MaxHedges: -1}, "Config.MaxHedges", "must be in [1, 100], got -1"},
		{"MaxHedges 101", Config{MaxHedges: 101}, "Config.MaxHedges", "must be in [1, 100], got 101"},
		{"Delay negative", Config{Delay: -time.Millisecond}, "Config.Delay", "must be >= 0, got -1ms"},
		{"Quantile 1", Config{Quantile: 1}, "Config.Quantile", "must be in (0, 1), got 1"},
		{"Quantile negative", Config{Quantile: -0.5}, "Config.Quantile", "must be in (0, 1), got -0.5"},
		{"Quantile NaN", Config{Quantile: nan}, "Config.Quantile", "must be in (0, 1), got NaN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.MeterProvider = noop.NewMeterProvider()
			h, err := New(tt.cfg)
			if tt.field == "" {
				if err != nil || h == nil {
					t.Errorf("New = %v, %v; want valid", h, err)
				}
				return
			}
			if err == nil || h != nil {
				t.Fatalf("New = %v, %v; want an error naming %s", h, err, tt.field)
			}
			if want := "hedge: " + tt.field + " " + tt.msg; err.Error() != want {
				t.Errorf("err = %q, want %q", err, want)
			}
		})
	}
}

// attemptLog records, for each attempt of one call, when it started and
// how its context ended.
type attemptLog struct {
	mu     sync.Mutex
	starts map[int]time.Duration
	causes map[int]error
	t0     time.Time
}

func newAttemptLog() *attemptLog {
	return &attemptLog{starts: map[int]time.Duration{}, causes: map[int]error{}, t0: time.Now()}
}

// fn returns an fn whose attempt n takes lat(n) (or until its context is
// done) and then returns err(n).
func (l *attemptLog) fn(lat func(n int) time.Duration, errFor func(n int) error) policy.Func {
	return func(ctx context.Context) error {
		n := Attempt(ctx)
		l.mu.Lock()
		l.starts[n] = time.Since(l.t0)
		l.mu.Unlock()
		select {
		case <-time.After(lat(n)):
			return errFor(n)
		case <-ctx.Done():
			l.mu.Lock()
			l.causes[n] = context.Cause(ctx)
			l.mu.Unlock()
			return ctx.Err()
		}
	}
}

func (l *attemptLog) started() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Duration
	for n := 1; n <= len(l.starts); n++ {
		out = append(out, l.starts[n])
	}
	return out
}

func lats(ds ...time.Duration) func(int) time.Duration {
	return func(n int) time.Duration { return ds[n-1] }
}

// After the delay with no answer a hedge starts; the first success wins at
// once, and the loser is canceled with the cause ErrLost.
func TestHedgeFixedDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedge(t, Config{Delay: 15 * time.Millisecond})
		l := newAttemptLog()
		start := time.Now()
		err := hedged(h, t.Context(), l.fn(lats(100*time.Millisecond, 10*time.Millisecond), always(nil)))
		if err != nil || time.Since(start) != 25*time.Millisecond {
			t.Errorf("Execute = %v after %v; want nil after 25ms", err, time.Since(start))
		}
		synctest.Wait()
		if got := l.started(); !slices.Equal(got, []time.Duration{0, 15 * time.Millisecond}) {
			t.Errorf("attempts started at %v, want [0 15ms]", got)
		}
		if c := l.causes[1]; !errors.Is(c, ErrLost) {
			t.Errorf("the loser's cause = %v, want ErrLost", c)
		}
	})
}

// As Do returns, every attempt's context is canceled: the losers'
// with the cause ErrLost (which reads as context.Canceled), the
// winner's (its fn has returned) with no cause of its own, so that fn can
// tell a loss from the call's end.
func TestHedgedCancelsTheWinnerWithoutCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedge(t, Config{Delay: 10 * time.Millisecond})
		ctxs := make(chan context.Context, 2)
		v, err := Do(t.Context(), h, nil, func(ctx context.Context) (int, error) {
			ctxs <- ctx
			if Attempt(ctx) == 1 {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			return 2, nil
		})
		if v != 2 || err != nil {
			t.Fatalf("Do = %d, %v; want 2, nil", v, err)
		}
		synctest.Wait()
		if !errors.Is(ErrLost, context.Canceled) {
			t.Error("ErrLost does not match context.Canceled")
		}
		for range 2 {
			ctx := <-ctxs
			want := ErrLost
			if Attempt(ctx) == 2 {
				want = context.Canceled
			}
			if c := context.Cause(ctx); c != want {
				t.Errorf("attempt %d's cause = %v, want %v", Attempt(ctx), c, want)
			}
		}
	})
}

// An attempt that answers before the delay is the only one.
func TestHedgeNotNeeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedge(t, Config{Delay: 15 * time.Millisecond, MaxHedges: 3})
		l := newAttemptLog()
		if err := hedged(h, t.Context(), l.fn(lats(14*time.Millisecond), always(nil))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if got := l.started(); len(got) != 1 {
			t.Errorf("attempts started at %v, want one", got)
		}
	})
}

// A failed attempt starts the next hedge at once; the next on delay counts
// from it. With every attempt failing, the call ends exhausted.
func TestHedgeFailureStartsNextAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedge(t, Config{Name: "x", Delay: 15 * time.Millisecond, MaxHedges: 2})
		l := newAttemptLog()
		last := errors.New("503")
		err := hedged(h, t.Context(), l.fn(lats(2*time.Millisecond, 100*time.Millisecond, 1*time.Millisecond), always(last)))
		if got := l.started(); !slices.Equal(got, []time.Duration{0, 2 * time.Millisecond, 17 * time.Millisecond}) {
			t.Errorf("attempts started at %v, want [0 2ms 17ms]", got)
		}
		var ee *retry.ExhaustedError
		if !errors.As(err, &ee) || ee.Kind != kind || ee.Reason != retry.ReasonMaxAttempts || ee.Attempts != 3 || !errors.Is(err, last) || !errors.Is(err, retry.ErrExhausted) {
			t.Fatalf("err = %#v; want an exhaustion of 3 attempts wrapping the last error", err)
		}
		if want := `hedge "x": gave up after 3 attempts: 503`; err.Error() != want {
			t.Errorf("message %q, want %q", err, want)
		}
	})
}

// A fn that ignores its context in a losing attempt: the winner returns at
// once, Do returns the winner's value, and the loser's goroutine
// ends when fn returns (goleak checks at the end of the package's tests).
func TestHedgeLoserIgnoresContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedge(t, Config{Delay: 10 * time.Millisecond})
		release := make(chan struct{})
		var loserDone atomic.Bool
		start := time.Now()
		v, err := Do(t.Context(), h, nil, func(ctx context.Context) (string, error) {
			if Attempt(ctx) == 1 {
				<-release // ignores ctx
				loserDone.Store(true)
				return "loser", nil
			}
			time.Sleep(5 * time.Millisecond)
			return "winner", nil
		})
		if v != "winner" || err != nil || time.Since(start) != 15*time.Millisecond {
			t.Errorf("Do = %q, %v after %v; want the winner at 15ms", v, err, time.Since(start))
		}
		close(release)
		synctest.Wait()
		if !loserDone.Load() {
			t.Errorf("the loser did not finish")
		}
	})
}

// An attempt that calls runtime.Goexit ends the call with an error, and
// the other attempts are canceled with ErrLost.
func TestHedgeGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedge(t, Config{Delay: time.Millisecond})
		var canceled atomic.Bool
		err := hedged(h, t.Context(), func(ctx context.Context) error {
			if Attempt(ctx) == 1 {
				time.Sleep(5 * time.Millisecond)
				runtime.Goexit()
			}
			<-ctx.Done()
			canceled.Store(errors.Is(context.Cause(ctx), ErrLost))
			return ctx.Err()
		})
		synctest.Wait()
		if !errors.Is(err, errExited) || !canceled.Load() {
			t.Errorf("err = %v, the other attempt canceled with ErrLost: %v; want errExited, true", err, canceled.Load())
		}
	})
}

// The caller's cancellation ends the call at once, with its error.
func TestHedgeCallerCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedge(t, Config{Delay: time.Millisecond, MaxHedges: 3})
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		l := newAttemptLog()
		start := time.Now()
		err := hedged(h, ctx, l.fn(lats(time.Hour, time.Hour, time.Hour, time.Hour), always(nil)))
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 20*time.Millisecond {
			t.Errorf("Execute = %v after %v; want the deadline at 20ms", err, time.Since(start))
		}
		synctest.Wait()
		if len(l.started()) != 4 {
			t.Errorf("attempts = %d, want 4", len(l.started()))
		}
	})
}

// A permanent error, a ShouldRetry refusal and a rejection end hedging:
// the first two end the call at once (canceling the others), a rejection
// of the first attempt is the call's outcome, unchanged.
func TestHedgeFatalErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fatal := errors.New("400")
		h := mustHedge(t, Config{Delay: 10 * time.Millisecond, MaxHedges: 3, ShouldRetry: func(err error) bool { return err != fatal }})
		l := newAttemptLog()
		err := hedged(h, t.Context(), l.fn(lats(time.Hour, 2*time.Millisecond, time.Hour, time.Hour), func(n int) error { return policy.Permanent(fatal) }))
		synctest.Wait()
		if err != fatal || len(l.started()) != 2 || !errors.Is(l.causes[1], ErrLost) {
			t.Errorf("permanent: err = %v after %d attempts, first canceled with %v; want the error itself after 2, the first canceled", err, len(l.started()), l.causes[1])
		}
		l = newAttemptLog()
		err = hedged(h, t.Context(), l.fn(lats(time.Hour, 2*time.Millisecond, time.Hour, time.Hour), always(fatal)))
		synctest.Wait()
		if err != fatal || len(l.started()) != 2 || !errors.Is(l.causes[1], ErrLost) {
			t.Errorf("ShouldRetry false: err = %v after %d attempts; want the error after 2, the first canceled", err, len(l.started()))
		}
		synctest.Wait()
		rej := policy.NewRejectedError("breaker", "b", "open", nil)
		l = newAttemptLog()
		err = hedged(h, t.Context(), l.fn(lats(0), always(rej)))
		if err != rej || len(l.started()) != 1 {
			t.Errorf("rejection: err = %v after %d attempts; want the rejection after 1", err, len(l.started()))
		}
	})
}

// A rejected hedge after a failure: the call is exhausted with Reason
// rejected, wrapping fn's failure.
func TestHedgeRejectedAfterFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedge(t, Config{Delay: time.Hour, MaxHedges: 3})
		rej := policy.NewRejectedError("breaker", "b", "open", nil)
		err := hedged(h, t.Context(), func(ctx context.Context) error {
			if Attempt(ctx) == 1 {
				return errBoom
			}
			return rej
		})
		var ee *retry.ExhaustedError
		if !errors.As(err, &ee) || ee.Reason != retry.ReasonRejected || ee.Rejection != rej || ee.Attempts != 1 || errors.Is(err, policy.ErrRejected) || !errors.Is(err, errBoom) {
			t.Errorf("err = %#v; want exhausted, Reason rejected, wrapping errBoom", err)
		}
	})
}

// Every hedge draws on the budget; a refused hedge is not started, and a
// call whose failures found the budget spent ends with Reason budget.
func TestHedgeBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBudget(t, retry.BudgetConfig{Ratio: 0.6, MinPerSecond: -1})
		h := mustHedge(t, Config{Delay: 10 * time.Millisecond, Budget: b, MaxHedges: 2})
		l := newAttemptLog()
		// One call: 0.6 of a hedge paid for; none starts.
		if err := hedged(h, t.Context(), l.fn(lats(50*time.Millisecond), always(nil))); err != nil || len(l.started()) != 1 {
			t.Errorf("err = %v after %d attempts; want success after 1", err, len(l.started()))
		}
		// The second call pays for one hedge; the third attempt is refused.
		l = newAttemptLog()
		err := hedged(h, t.Context(), l.fn(lats(50*time.Millisecond, 50*time.Millisecond), always(errBoom)))
		var ee *retry.ExhaustedError
		if !errors.As(err, &ee) || ee.Reason != retry.ReasonBudget || ee.Attempts != 2 || len(l.started()) != 2 {
			t.Errorf("err = %v after %d attempts; want exhausted by the budget after 2", err, len(l.started()))
		}
		if got := b.Available(); got < 0 || got >= 1 {
			t.Errorf("Available = %v, want in [0, 1)", got)
		}
	})
}

// The learned delay is the quantile of recent latencies, at least Delay,
// and Delay (none if zero) before 20 latencies.
func TestHedgeLearnedDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedgeWindow(t, Config{Quantile: 0.9}, 100)
		if d := h.delay(); d >= 0 {
			t.Errorf("Delay before any latency = %v, want none", d)
		}
		call := func(h *Hedge, lat time.Duration) {
			if err := hedged(h, t.Context(), func(ctx context.Context) error { time.Sleep(lat); return nil }); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 19 {
			call(h, time.Duration(i+1)*time.Millisecond)
		}
		if d := h.delay(); d >= 0 {
			t.Errorf("Delay after 19 latencies = %v, want none", d)
		}
		call(h, 20*time.Millisecond)
		if d := h.delay(); d != 18*time.Millisecond {
			t.Errorf("Delay after 1..20ms = %v, want the p90, 18ms", d)
		}
		// With a Delay: used from the start, and the floor once 100 fast
		// calls have replaced the window.
		floor := mustHedgeWindow(t, Config{Quantile: 0.9, Delay: 5 * time.Millisecond}, 100)
		if d := floor.delay(); d != 5*time.Millisecond {
			t.Errorf("Delay before any latency = %v, want Delay, 5ms", d)
		}
		for range 100 {
			call(h, time.Millisecond)
			call(floor, time.Millisecond)
		}
		if d := h.delay(); d != time.Millisecond {
			t.Errorf("Delay after 100 x 1ms = %v, want 1ms", d)
		}
		if d := floor.delay(); d != 5*time.Millisecond {
			t.Errorf("Delay after 100 x 1ms = %v, want the floor, 5ms", d)
		}
	})
}

// A loser canceled after running longer than the delay counts as a slow
// latency: with every first attempt slow, the learned delay does not fall
// to the hedges' fast latencies alone.
func TestHedgeCensoredLatencies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedgeWindow(t, Config{Quantile: 0.6, Delay: time.Millisecond}, 20)
		for range 40 {
			l := newAttemptLog()
			if err := hedged(h, t.Context(), l.fn(lats(time.Hour, 10*time.Millisecond), always(nil))); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		// Samples: the winners' 10ms, the losers' lower bounds of 20ms and
		// more, as many: the 60th percentile is above 10ms. Without them it
		// would be 10ms.
		if d := h.delay(); d <= 10*time.Millisecond {
			t.Errorf("Delay = %v; want above the winners' 10ms", d)
		}
	})
}

// watertight.hedges counts hedges by outcome; exhaustions carry the kind
// hedge and their reason.
func TestHedgeTelemetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		h := mustHedge(t, Config{Name: "h", Delay: 10 * time.Millisecond, MaxHedges: 1, MeterProvider: mp})
		ctx := t.Context()
		// won: the hedge answers first.
		hedged(h, ctx, newAttemptLog().fn(lats(time.Hour, time.Millisecond), always(nil)))
		// lost: the first attempt answers while the hedge runs.
		hedged(h, ctx, newAttemptLog().fn(lats(12*time.Millisecond, time.Hour), always(nil)))
		// failed, then the call is exhausted.
		hedged(h, ctx, newAttemptLog().fn(lats(time.Millisecond, time.Millisecond), always(errBoom)))
		// canceled: the caller gives up while the hedge runs.
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		hedged(h, cctx, newAttemptLog().fn(lats(time.Hour, time.Hour), always(nil)))
		cancel()
		synctest.Wait()
		got := sums(t, reader)
		kind, name := telemetry.KeyKind.String(kind), telemetry.KeyName.String("h")
		for _, o := range hedgeOutcomes {
			if v := got[metricHedges][attribute.NewSet(kind, name, keyOutcome.String(o))]; v != 1 {
				t.Errorf("hedges{outcome=%s} = %d, want 1", o, v)
			}
		}
		if v := got[telemetry.MetricExhausted][attribute.NewSet(kind, name, telemetry.KeyRetryReason.String(retry.ReasonMaxAttempts))]; v != 1 || len(got[telemetry.MetricExhausted]) != 1 {
			t.Errorf("exhausted = %v, want 1 with reason max_attempts", got[telemetry.MetricExhausted])
		}
	})
}

// TestHedgeProperties drives Hedges of random configurations, sharing a
// retry.Budget, with random calls (latencies, failures, caller
// cancellations, fns that ignore their context), in synctest bubbles, and
// checks that a call never makes more than 1 + MaxHedges attempts, that
// every attempt that starts ends once, that the budget never goes negative
// and never grants more hedges than were paid for, and that a call that
// succeeds returns the value of an attempt that succeeded.
func TestHedgeProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			ratio := rapid.SampledFrom([]float64{0.1, 0.5, 2}).Draw(rt, "ratio")
			minPerSecond := rapid.SampledFrom([]float64{-1, 1, 10}).Draw(rt, "minPerSecond")
			b, err := retry.NewBudget(retry.BudgetConfig{Ratio: ratio, MinPerSecond: minPerSecond})
			if err != nil {
				rt.Fatal(err)
			}
			var hedged atomic.Int64
			cfg := Config{
				MaxHedges:     rapid.IntRange(1, 4).Draw(rt, "maxHedges"),
				Delay:         time.Duration(rapid.IntRange(0, 20).Draw(rt, "delayMs")) * time.Millisecond,
				Quantile:      rapid.SampledFrom([]float64{0, 0.5, 0.9}).Draw(rt, "quantile"),
				Budget:        b,
				MeterProvider: noop.NewMeterProvider(),
				OnHedge:       func(context.Context, int, bool) { hedged.Add(1) },
			}
			h, err := New(cfg)
			if err != nil {
				rt.Fatal(err)
			}
			var (
				wg              sync.WaitGroup
				started, ended  atomic.Int64
				overrun, wrong  atomic.Int64
				calls           atomic.Int64
				releaseIgnorers = make(chan struct{})
			)
			start := time.Now()
			for range rapid.IntRange(1, 30).Draw(rt, "calls") {
				seed := rapid.Uint64().Draw(rt, "seed")
				cancelAfter := time.Duration(rapid.IntRange(0, 60).Draw(rt, "cancelAfterMs")) * time.Millisecond
				// An attempt that ignores its context, only in a call its
				// caller cancels: otherwise, if every other attempt failed,
				// the call would wait for it for ever.
				ignoreAt := 0
				if cancelAfter > 0 {
					ignoreAt = rapid.IntRange(0, 5).Draw(rt, "ignoreAt")
				}
				calls.Add(1)
				wg.Go(func() {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					if cancelAfter > 0 {
						stop := time.AfterFunc(cancelAfter, cancel)
						defer stop.Stop()
					}
					defer func() { _ = recover() }()
					var n, mu = atomic.Int64{}, sync.Mutex{}
					succeeded := map[int]bool{}
					v, err := Do(ctx, h, nil, func(ctx context.Context) (int, error) {
						started.Add(1)
						defer ended.Add(1)
						a := Attempt(ctx)
						if int(n.Add(1)) > 1+cfg.MaxHedges {
							overrun.Add(1)
						}
						x := seed + uint64(a)*0x9e3779b97f4a7c15
						x ^= x >> 29
						x *= 0xbf58476d1ce4e5b9
						lat := time.Duration(x%40) * time.Millisecond
						if a == ignoreAt {
							<-releaseIgnorers
						} else {
							select {
							case <-time.After(lat):
							case <-ctx.Done():
								return 0, ctx.Err()
							}
						}
						if x>>60 < 6 {
							return 0, errBoom
						}
						mu.Lock()
						succeeded[a] = true
						mu.Unlock()
						return a, nil
					})
					if err == nil {
						mu.Lock()
						ok := succeeded[v]
						mu.Unlock()
						if !ok {
							wrong.Add(1)
						}
					}
				})
				time.Sleep(time.Duration(rapid.IntRange(0, 30).Draw(rt, "gapMs")) * time.Millisecond)
			}
			wg.Wait()
			close(releaseIgnorers)
			synctest.Wait()
			if overrun.Load() != 0 {
				rt.Fatalf("a call made more than 1 + MaxHedges attempts")
			}
			if wrong.Load() != 0 {
				rt.Fatalf("%d calls returned a value no successful attempt produced", wrong.Load())
			}
			if started.Load() != ended.Load() {
				rt.Fatalf("%d attempts started, %d ended", started.Load(), ended.Load())
			}
			bal := b.Available()
			perSecond := max(minPerSecond, 0)
			reserve := 10 * perSecond // the default Window: 10 s
			paid := reserve + ratio*float64(calls.Load()) + perSecond*time.Since(start).Seconds()
			if bal < 0 || float64(hedged.Load()) > paid+1e-6 {
				rt.Fatalf("balance %v, %d hedges for %v paid", bal, hedged.Load(), paid)
			}
		})
	})
}

// A storm on real time: 32 goroutines make calls through one Hedge and one
// retry.Budget with random latencies, failures, caller cancellations and
// fns that ignore their context. No timed assertion: every call returns,
// every attempt
// that started ends, a call that succeeds returns a successful attempt's
// value, and nothing is left running (goleak at the end of the package).
func TestHedgeStorm(t *testing.T) {
	b := mustBudget(t, retry.BudgetConfig{Ratio: 0.5})
	h := mustHedgeWindow(t, Config{MaxHedges: 2, Quantile: 0.5, Delay: 50 * time.Microsecond, Budget: b}, 64)
	var started, ended, bad atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range 60 {
				ctx, cancel := context.WithCancel(context.Background())
				if r.IntN(4) == 0 {
					stop := time.AfterFunc(time.Duration(r.IntN(500))*time.Microsecond, cancel)
					defer stop.Stop()
				}
				ignoreCtx := r.IntN(10) == 0
				seed := r.Uint64()
				func() {
					v, err := Do(ctx, h, nil, func(ctx context.Context) (uint64, error) {
						started.Add(1)
						defer ended.Add(1)
						a := Attempt(ctx)
						x := seed ^ uint64(a)*0x9e3779b97f4a7c15
						x ^= x >> 31
						lat := time.Duration(x%400) * time.Microsecond
						if ignoreCtx {
							time.Sleep(lat)
						} else {
							select {
							case <-time.After(lat):
							case <-ctx.Done():
								return 0, ctx.Err()
							}
						}
						if x%5 == 0 {
							return 0, errBoom
						}
						return x, nil
					})
					if err == nil && v == 0 {
						bad.Add(1)
					}
				}()
				cancel()
			}
		})
	}
	wg.Wait()
	// Losers that ignored their context finish on their own.
	for deadline := time.Now().Add(10 * time.Second); started.Load() != ended.Load() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if started.Load() != ended.Load() || bad.Load() != 0 {
		t.Errorf("%d attempts started, %d ended; %d successes without a value", started.Load(), ended.Load(), bad.Load())
	}
	if a := b.Available(); a < 0 {
		t.Errorf("Available = %v", a)
	}
}

// A user callback that panics (ShouldRetry here) ends the call with its
// panic, and the attempts still running are canceled all the same.
func TestHedgeCallbackPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := mustHedge(t, Config{Delay: time.Millisecond, MaxHedges: 2,
			ShouldRetry: func(error) bool { panic("ShouldRetry panicked") }})
		l := newAttemptLog()
		func() {
			defer func() {
				if v := recover(); v != "ShouldRetry panicked" {
					t.Errorf("recovered %v", v)
				}
			}()
			hedged(h, t.Context(), l.fn(lats(time.Hour, 2*time.Millisecond, time.Hour), always(errBoom)))
		}()
		synctest.Wait()
		if !errors.Is(l.causes[1], ErrLost) || len(l.started()) < 2 {
			t.Errorf("attempts %v, first canceled with %v; want it canceled with ErrLost", l.started(), l.causes[1])
		}
	})
}

func TestNilPanics(t *testing.T) {
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"Do nil ctx", func() {
			_, _ = Do(nil, mustHedge(t, Config{}), nil, func(context.Context) (int, error) { return 0, nil }) //nolint:staticcheck
		}, "hedge: nil Context"},
		{"Do nil Hedge", func() { _, _ = Do(t.Context(), nil, nil, func(context.Context) (int, error) { return 0, nil }) }, "hedge: nil Hedge"},
		{"Do nil fn", func() { _, _ = Do[int](t.Context(), mustHedge(t, Config{}), nil, nil) }, "hedge: nil fn"},
		{"Attempt nil ctx", func() { _ = Attempt(nil) }, "hedge: nil Context"}, //nolint:staticcheck
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

// hedged runs fn hedged by h, for the tests that need no value.
func hedged(h *Hedge, ctx context.Context, fn policy.Func) error {
	_, err := Do(ctx, h, nil, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}

// A hedge whose failure a ShouldRetry that panics is asked about is
// counted once, as canceled: the call ended with the panic.
func TestShouldRetryPanicCountsTheHedgeOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
		h := mustHedge(t, Config{Name: "sr", Delay: time.Millisecond, MaxHedges: 1, MeterProvider: mp,
			ShouldRetry: func(error) bool { panic("ShouldRetry panicked") }})
		func() {
			defer func() {
				if v := recover(); v != "ShouldRetry panicked" {
					t.Errorf("recovered %v", v)
				}
			}()
			hedged(h, context.Background(), func(ctx context.Context) error {
				if Attempt(ctx) == 1 {
					<-ctx.Done()
					return ctx.Err()
				}
				return errBoom // the hedge fails
			})
		}()
		synctest.Wait()
		var total int64
		for _, v := range sums(t, r)[metricHedges] {
			total += v
		}
		if total != 1 {
			t.Errorf("%d hedges counted; want the one hedge, once", total)
		}
	})
}

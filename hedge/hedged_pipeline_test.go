package hedge_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"

	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/hedge"
	"github.com/watertight/watertight/retry"
)

// hedgedPipeline is a pipeline of a bulkhead of limit and a breaker (and
// an Attempt deadline if withAttempt), traced by tp.
func hedgedPipeline(t *testing.T, limit int, withAttempt bool, tp *sdktrace.TracerProvider) (*compose.Pipeline, *bulkhead.Bulkhead, *breaker.Breaker) {
	t.Helper()
	mp := noop.NewMeterProvider()
	bh, err := bulkhead.New(bulkhead.Config{Name: "bh", Limit: limit, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	br, err := breaker.New(breaker.Config{Name: "b", MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	ps := compose.Policies{Bulkhead: bh, Breaker: br}
	if withAttempt {
		// The breaker then runs in two phases (compose's runStage);
		// without, it is the innermost slot and wraps fn itself.
		ps.Attempt, err = deadline.New(deadline.Config{Name: "a", Timeout: time.Second, MeterProvider: mp})
		if err != nil {
			t.Fatal(err)
		}
	}
	opts := []compose.Option{compose.WithMeterProvider(mp)}
	if tp != nil {
		opts = append(opts, compose.WithTracerProvider(tp))
	}
	p, err := compose.New("hedged", ps, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p, bh, br
}

func newHedge(t *testing.T, delay time.Duration) *hedge.Hedge {
	t.Helper()
	h, err := hedge.New(hedge.Config{Name: "h", Delay: delay, MeterProvider: noop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Do around a pipeline runs each attempt as a whole call of it: each
// attempt holds its own bulkhead slot (two at once while both run) and
// has its own call span; the breaker sees the winner's success and the
// canceled loser as an exclusion, not a failure; Do returns the
// winner's value.
func TestHedgedRunsEachAttemptThroughThePipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		defer tp.Shutdown(context.Background())
		p, bh, br := hedgedPipeline(t, 2, false, tp)
		loserCause := make(chan error, 1)
		var active int
		v, err := hedge.Do(t.Context(), newHedge(t, 10*time.Millisecond), p, func(ctx context.Context) (string, error) {
			if hedge.Attempt(ctx) == 1 {
				<-ctx.Done()
				loserCause <- context.Cause(ctx)
				return "", ctx.Err()
			}
			active = bh.Active()
			time.Sleep(5 * time.Millisecond)
			return "hedge", nil
		})
		if v != "hedge" || err != nil {
			t.Fatalf("Do = %q, %v; want the hedge's value", v, err)
		}
		if c := <-loserCause; !errors.Is(c, hedge.ErrLost) {
			t.Errorf("loser's cause = %v, want ErrLost", c)
		}
		if active != 2 {
			t.Errorf("bulkhead Active = %d while both attempts ran, want 2: a slot each", active)
		}
		synctest.Wait()
		if c := br.Counts(); c.TotalSuccesses != 1 || c.TotalFailures != 0 || c.TotalExclusions != 1 {
			t.Errorf("breaker counts = %+v; want 1 success, 1 exclusion, no failure", c)
		}
		if n := bh.Active(); n != 0 {
			t.Errorf("bulkhead Active = %d after the call, want 0", n)
		}
		calls := 0
		for _, s := range sr.Ended() {
			if s.Name() == "watertight hedged" {
				calls++
			}
		}
		if calls != 2 {
			t.Errorf("%d pipeline call spans, want one per attempt, 2", calls)
		}
	})
}

// A hedge the bulkhead refuses (its one slot is the first attempt's) is
// a rejection: no more hedges start, and the call ends with the first
// attempt's success.
func TestHedgedStopsWhenTheBulkheadRefusesAHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, bh, _ := hedgedPipeline(t, 1, false, nil)
		h, err := hedge.New(hedge.Config{Delay: time.Millisecond, MaxHedges: 3, MeterProvider: noop.NewMeterProvider()})
		if err != nil {
			t.Fatal(err)
		}
		var ran atomic.Int32
		v, err := hedge.Do(t.Context(), h, p, func(ctx context.Context) (int, error) {
			ran.Add(1)
			time.Sleep(10 * time.Millisecond)
			return hedge.Attempt(ctx), nil
		})
		if v != 1 || err != nil || ran.Load() != 1 {
			t.Errorf("Do = %d, %v after %d runs of fn; want attempt 1's value, fn run once", v, err, ran.Load())
		}
		if n := bh.Active(); n != 0 {
			t.Errorf("bulkhead Active = %d after the call, want 0", n)
		}
	})
}

// A loser that turns its cancellation into an error of its own (a driver's
// "timeout") is still excluded by the breaker in the pipeline: its
// context ended, with the cause ErrLost.
func TestHedgedLoserExcludedWhateverItsError(t *testing.T) {
	for _, name := range []string{"innermost", "attempt"} {
		t.Run(name, testHedgedLoserExcluded)
	}
}

func testHedgedLoserExcluded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _, br := hedgedPipeline(t, 2, strings.HasSuffix(t.Name(), "attempt"), nil)
		driverTimeout := errors.New("driver: i/o timeout")
		_, err := hedge.Do(t.Context(), newHedge(t, 10*time.Millisecond), p, func(ctx context.Context) (struct{}, error) {
			if hedge.Attempt(ctx) == 1 {
				<-ctx.Done()
				return struct{}{}, driverTimeout
			}
			return struct{}{}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if c := br.Counts(); c.TotalSuccesses != 1 || c.TotalFailures != 0 || c.TotalExclusions != 1 {
			t.Errorf("breaker counts = %+v; want 1 success, 1 exclusion, no failure", c)
		}
	})
}

// A Budget behind a Retry in a compose pipeline: compose drives the loop
// (Start, Attempt, Next), and the calls deposit and the retries withdraw
// as through Execute; a refused retry ends the call with Reason budget.
func TestBudgetInPipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := retry.NewBudget(retry.BudgetConfig{Ratio: 0.6, MinPerSecond: -1})
		if err != nil {
			t.Fatal(err)
		}
		r, err := retry.New(retry.Config{Budget: b, MaxAttempts: 5, MeterProvider: noop.NewMeterProvider(),
			NewSchedule: func() backoff.BackOff { return &backoff.ZeroBackOff{} }})
		if err != nil {
			t.Fatal(err)
		}
		br, err := breaker.New(breaker.Config{Name: "b", MeterProvider: noop.NewMeterProvider()})
		if err != nil {
			t.Fatal(err)
		}
		p, err := compose.New("budgeted", compose.Policies{Retry: r, Breaker: br}, compose.WithMeterProvider(noop.NewMeterProvider()))
		if err != nil {
			t.Fatal(err)
		}
		boom := errors.New("503")
		attempts := 0
		fail := func(context.Context) error { attempts++; return boom }
		for range 2 {
			p.Execute(t.Context(), func(context.Context) error { return nil }) // deposits 1.2
		}
		err = p.Execute(t.Context(), fail) // deposits 0.6: 1.8, one retry
		var ee *retry.ExhaustedError
		if attempts != 2 || !errors.As(err, &ee) || ee.Reason != retry.ReasonBudget || !errors.Is(err, boom) {
			t.Errorf("attempts = %d, err = %v; want 2 attempts, then refused by the budget", attempts, err)
		}
	})
}

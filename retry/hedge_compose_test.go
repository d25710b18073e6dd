package retry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// A Hedge in a compose pipeline's Retry slot: each attempt runs through the
// slots below (the breaker sees the winner's success and the canceled
// loser as an exclusion, not a failure), each gets an attempt span with
// its number, and policy.Do returns the winner's value.
func TestHedgeInPipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		defer tp.Shutdown(context.Background())
		h, err := retry.NewHedge(retry.HedgeConfig{Name: "h", Delay: 10 * time.Millisecond, MeterProvider: noop.NewMeterProvider()})
		if err != nil {
			t.Fatal(err)
		}
		br, err := breaker.New(breaker.Config{Name: "b", MeterProvider: noop.NewMeterProvider()})
		if err != nil {
			t.Fatal(err)
		}
		p, err := compose.New("hedged", compose.Policies{Retry: h, Breaker: br},
			compose.WithTracerProvider(tp), compose.WithMeterProvider(noop.NewMeterProvider()))
		if err != nil {
			t.Fatal(err)
		}
		loserCause := make(chan error, 1)
		v, err := policy.Do(t.Context(), p, func(ctx context.Context) (string, error) {
			if retry.Attempt(ctx) == 1 {
				<-ctx.Done()
				loserCause <- context.Cause(ctx)
				return "", ctx.Err()
			}
			time.Sleep(5 * time.Millisecond)
			return "hedge", nil
		})
		if v != "hedge" || err != nil {
			t.Fatalf("Do = %q, %v; want the hedge's value", v, err)
		}
		if c := <-loserCause; !errors.Is(c, retry.ErrHedgeLost) {
			t.Errorf("loser's cause = %v, want ErrHedgeLost", c)
		}
		synctest.Wait()
		if c := br.Counts(); c.TotalSuccesses != 1 || c.TotalFailures != 0 || c.TotalExclusions != 1 {
			t.Errorf("breaker counts = %+v; want 1 success, 1 exclusion, no failure", c)
		}
		var attempts []int64
		for _, s := range sr.Ended() {
			if s.Name() == "watertight hedged attempt" {
				set := attribute.NewSet(s.Attributes()...)
				n, _ := set.Value("watertight.retry.attempt")
				attempts = append(attempts, n.AsInt64())
			}
		}
		if len(attempts) != 2 || attempts[0]+attempts[1] != 3 {
			t.Errorf("attempt spans for attempts %v, want 1 and 2", attempts)
		}
	})
}

// A loser that turns its cancellation into an error of its own (a driver's
// "timeout") is still excluded by the breaker below the hedge: compose
// reports it as canceled, from its context's cause.
func TestHedgeLoserExcludedWhateverItsError(t *testing.T) {
	for _, name := range []string{"innermost", "attempt"} {
		t.Run(name, testHedgeLoserExcluded)
	}
}

func testHedgeLoserExcluded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := retry.NewHedge(retry.HedgeConfig{Delay: 10 * time.Millisecond, MeterProvider: noop.NewMeterProvider()})
		if err != nil {
			t.Fatal(err)
		}
		br, err := breaker.New(breaker.Config{Name: "b", MeterProvider: noop.NewMeterProvider()})
		if err != nil {
			t.Fatal(err)
		}
		// With an Attempt deadline the breaker runs in two phases
		// (compose's runStage); without, it is the innermost slot and wraps
		// fn itself: both paths must report the loser as canceled.
		withAttempt := strings.HasSuffix(t.Name(), "attempt")
		ps := compose.Policies{Retry: h, Breaker: br}
		if withAttempt {
			ps.Attempt, err = deadline.New(deadline.Config{Name: "a", Timeout: time.Second, MeterProvider: noop.NewMeterProvider()})
			if err != nil {
				t.Fatal(err)
			}
		}
		p, err := compose.New("hedged", ps, compose.WithMeterProvider(noop.NewMeterProvider()))
		if err != nil {
			t.Fatal(err)
		}
		driverTimeout := errors.New("driver: i/o timeout")
		err = p.Execute(t.Context(), func(ctx context.Context) error {
			if retry.Attempt(ctx) == 1 {
				<-ctx.Done()
				return driverTimeout
			}
			return nil
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
// (AttemptContext, Next), and the calls deposit and the retries withdraw
// as through Execute; a refused retry ends the call with Reason budget.
func TestBudgetInPipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := retry.NewBudget(retry.BudgetConfig{Ratio: 0.6, MinPerSecond: retry.NoMinimum})
		if err != nil {
			t.Fatal(err)
		}
		r, err := retry.New(retry.Config{Budget: b, MaxAttempts: 5, MeterProvider: noop.NewMeterProvider(),
			NewSchedule: func() retry.Schedule { return retry.ScheduleFunc(func() (time.Duration, bool) { return 0, true }) }})
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

package compose_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

var errTransient = errors.New("transient")

// The whole retry sequence, waits included, holds one bulkhead slot: a
// second caller is rejected while the first is between attempts.
func TestRetrySequenceHoldsOneSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bh := must[*bulkhead.Bulkhead](t)(bulkhead.New(bulkhead.Config{Name: "b", Limit: 1}))
		rt := must[*retry.Retry](t)(retry.New(retry.Config{
			MaxAttempts: 3, InitialInterval: time.Second, MaxInterval: time.Second, Jitter: -1,
		}))
		p := must[*compose.Pipeline](t)(compose.New("x", compose.Policies{Bulkhead: bh, Retry: rt}))
		var attempts atomic.Int32
		done := make(chan error)
		go func() {
			done <- p.Execute(context.Background(), func(ctx context.Context) error {
				attempts.Add(1)
				return errTransient
			})
		}()
		time.Sleep(1500 * time.Millisecond) // between attempts 2 and 3
		synctest.Wait()
		if bh.Active() != 1 || attempts.Load() != 2 {
			t.Fatalf("active %d, attempts %d", bh.Active(), attempts.Load())
		}
		err := p.Execute(context.Background(), func(context.Context) error { return nil })
		if !errors.Is(err, bulkhead.ErrFull) {
			t.Errorf("second caller: %v, want ErrFull", err)
		}
		err = <-done
		if !errors.Is(err, retry.ErrExhausted) || !errors.Is(err, errTransient) || attempts.Load() != 3 {
			t.Errorf("err %v after %d attempts", err, attempts.Load())
		}
		if bh.Active() != 0 {
			t.Errorf("slot not freed: active %d", bh.Active())
		}
	})
}

// An attempt timeout is retried; the whole-call deadline ends the loop and
// the call fails with the Deadline's ErrExceeded.
func TestAttemptTimeoutRetriedDeadlineEndsLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		whole := must[*deadline.Deadline](t)(deadline.New(deadline.Config{Name: "call", Timeout: time.Second}))
		each := must[*deadline.Deadline](t)(deadline.New(deadline.Config{Name: "attempt", Timeout: 300 * time.Millisecond}))
		rt := must[*retry.Retry](t)(retry.New(retry.Config{
			MaxAttempts: 10, InitialInterval: 50 * time.Millisecond, MaxInterval: 50 * time.Millisecond, Jitter: -1,
		}))
		p := must[*compose.Pipeline](t)(compose.New("x", compose.Policies{Deadline: whole, Retry: rt, Attempt: each}))
		var perAttempt []error
		start := time.Now()
		err := p.Execute(context.Background(), func(ctx context.Context) error {
			<-ctx.Done()
			perAttempt = append(perAttempt, ctx.Err())
			return ctx.Err()
		})
		elapsed := time.Since(start)
		// Attempts end at 300, 650 and 1000 ms; the third is cut by the
		// whole-call deadline (the attempt timer would fire at 1000 ms too,
		// but the attempt's deadline is not sooner than the call's, so no
		// attempt timer is set for it).
		if elapsed != time.Second {
			t.Errorf("elapsed %v, want 1s", elapsed)
		}
		if len(perAttempt) != 3 {
			t.Errorf("%d attempts, want 3", len(perAttempt))
		}
		var ee *deadline.ExceededError
		if !errors.As(err, &ee) || ee.Name != "call" || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want the whole-call deadline's ExceededError", err)
		}
		if errors.Is(err, retry.ErrExhausted) || errors.Is(err, policy.ErrRejected) {
			t.Errorf("err = %v: the deadline, not the retry, ended the call", err)
		}
	})
}

// The retry never sleeps into the whole-call deadline: when the next wait
// would pass it, the call gives up at once.
func TestRetryGivesUpBeforeDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		whole := must[*deadline.Deadline](t)(deadline.New(deadline.Config{Name: "call", Timeout: time.Second}))
		rt := must[*retry.Retry](t)(retry.New(retry.Config{
			MaxAttempts: 5, InitialInterval: 800 * time.Millisecond, MaxInterval: 800 * time.Millisecond, Jitter: -1,
		}))
		p := must[*compose.Pipeline](t)(compose.New("x", compose.Policies{Deadline: whole, Retry: rt}))
		start := time.Now()
		n := 0
		err := p.Execute(context.Background(), func(ctx context.Context) error {
			n++
			time.Sleep(50 * time.Millisecond)
			return errTransient
		})
		// 50 ms attempt, 800 ms wait, 50 ms attempt: the next wait would
		// end at 1.7 s, past the 1 s deadline, so the call ends at 900 ms.
		if elapsed := time.Since(start); elapsed != 900*time.Millisecond || n != 2 {
			t.Errorf("elapsed %v after %d attempts, want 900ms and 2", elapsed, n)
		}
		if !errors.Is(err, retry.ErrExhausted) || !errors.Is(err, errTransient) {
			t.Errorf("err = %v", err)
		}
	})
}

// A rejection below the retry ends the loop at once; fn is not run again.
func TestRejectionNotRetried(t *testing.T) {
	inner := must[*bulkhead.Bulkhead](t)(bulkhead.New(bulkhead.Config{Name: "inner", Limit: 1}))
	rt := must[*retry.Retry](t)(retry.New(retry.Config{MaxAttempts: 5}))
	// The inner bulkhead sits in the Breaker slot: any policy fits any slot.
	p := must[*compose.Pipeline](t)(compose.New("x", compose.Policies{Retry: rt, Breaker: inner}))
	hold := make(chan struct{})
	held := make(chan struct{})
	go inner.Execute(context.Background(), func(context.Context) error { close(held); <-hold; return nil })
	<-held
	defer close(hold)
	ran := 0
	err := p.Execute(context.Background(), func(context.Context) error { ran++; return nil })
	if !errors.Is(err, bulkhead.ErrFull) || ran != 0 {
		t.Errorf("err %v, fn ran %d times", err, ran)
	}
}

// The breaker sees every attempt: once it opens, the next attempt is
// rejected and the retry loop ends. Attempt timeouts count as breaker
// failures. fn ran, so the call is no rejection: it ends exhausted, with
// the last attempt's timeout and the breaker's refusal alongside.
func TestBreakerOpenEndsRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		br := must[*breaker.Breaker](t)(breaker.New(breaker.Config{Name: "llm", ConsecutiveFailures: 2}))
		each := must[*deadline.Deadline](t)(deadline.New(deadline.Config{Name: "attempt", Timeout: 100 * time.Millisecond}))
		rt := must[*retry.Retry](t)(retry.New(retry.Config{
			MaxAttempts: 5, InitialInterval: 10 * time.Millisecond, MaxInterval: 10 * time.Millisecond, Jitter: -1,
		}))
		p := must[*compose.Pipeline](t)(compose.New("x", compose.Policies{Retry: rt, Breaker: br, Attempt: each}))
		n := 0
		err := p.Execute(context.Background(), func(ctx context.Context) error {
			n++
			<-ctx.Done() // every attempt times out
			return ctx.Err()
		})
		var ee *retry.ExhaustedError
		if errors.Is(err, policy.ErrRejected) || !errors.Is(err, deadline.ErrExceeded) || !errors.As(err, &ee) ||
			ee.Reason != retry.ReasonRejected || ee.Attempts != 2 || ee.Rejection == nil || ee.Rejection.Reason != "open" {
			t.Errorf("err = %v, want the last timeout, exhausted by the open breaker's rejection", err)
		}
		if n != 2 || br.State() != breaker.Open {
			t.Errorf("fn ran %d times (want 2), breaker %v", n, br.State())
		}
	})
}

// A rejection means "refused before fn ran": when the failure of attempt 1
// opens the breaker and attempt 2 is rejected, the caller must not be told
// that fn never ran. The call's error is fn's, exhausted by the rejection.
func TestRejectionAfterFailureIsNotARejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		br := must[*breaker.Breaker](t)(breaker.New(breaker.Config{Name: "llm", ConsecutiveFailures: 1}))
		defer br.Close()
		rt := must[*retry.Retry](t)(retry.New(retry.Config{Name: "llm", MaxAttempts: 3, InitialInterval: time.Millisecond}))
		p := must[*compose.Pipeline](t)(compose.New("llm", compose.Policies{Retry: rt, Breaker: br}))
		ran := 0
		err := p.Execute(context.Background(), func(context.Context) error { ran++; return errTransient })
		if ran != 1 {
			t.Fatalf("fn ran %d times, want 1", ran)
		}
		if errors.Is(err, policy.ErrRejected) || errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("err = %v matches a rejection, but fn ran", err)
		}
		if !errors.Is(err, errTransient) || !errors.Is(err, retry.ErrExhausted) {
			t.Fatalf("err = %v, want fn's error, exhausted", err)
		}
		var ee *retry.ExhaustedError
		if !errors.As(err, &ee) || ee.Reason != retry.ReasonRejected || ee.Attempts != 1 ||
			ee.Rejection == nil || ee.Rejection.Kind != "breaker" || ee.Rejection.Reason != "open" {
			t.Fatalf("err = %v (%+v), want an ExhaustedError with Reason rejected and the breaker's rejection", err, ee)
		}
		want := `retry "llm": gave up after 1 attempt: attempt 2 was rejected (breaker "llm" rejected the call: open): transient`
		if err.Error() != want {
			t.Errorf("message = %q, want %q", err, want)
		}
		// The next call is refused before fn runs: that one is a rejection.
		err = p.Execute(context.Background(), func(context.Context) error { ran++; return nil })
		if !errors.Is(err, breaker.ErrOpen) || !errors.Is(err, policy.ErrRejected) || ran != 1 {
			t.Errorf("next call: err = %v, fn ran %d times; want the open breaker's rejection, fn not run", err, ran)
		}
	})
}

// An attempt that times out and whose fn marks the failure permanent (as
// the HTTP layer does for a POST it must not resend) still ends with the
// attempt deadline's ErrExceeded: the retry strips only a marker fn
// returned itself, not one wrapped by a policy below it.
func TestPermanentAttemptTimeoutKeepsExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		each := must[*deadline.Deadline](t)(deadline.New(deadline.Config{Name: "attempt", Timeout: 100 * time.Millisecond}))
		rt := must[*retry.Retry](t)(retry.New(retry.Config{MaxAttempts: 3}))
		p := must[*compose.Pipeline](t)(compose.New("x", compose.Policies{Retry: rt, Attempt: each}))
		n := 0
		err := p.Execute(context.Background(), func(ctx context.Context) error {
			n++
			<-ctx.Done()
			return policy.Permanent(ctx.Err())
		})
		var ee *deadline.ExceededError
		if n != 1 || !errors.Is(err, deadline.ErrExceeded) || !errors.As(err, &ee) || ee.Name != "attempt" {
			t.Errorf("fn ran %d times, err = %v; want 1 and the attempt's ErrExceeded", n, err)
		}
	})
}

// A bulkhead and a breaker, the breaker innermost, allocate one object per
// call with no SDK installed: gobreaker's done closure (its two-step Allow);
// compose itself adds none.
func TestBulkheadBreakerAllocatesOnlyGobreakers(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	bh, err := bulkhead.New(bulkhead.Config{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := breaker.New(breaker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	p, err := compose.New("x", compose.Policies{Bulkhead: bh, Breaker: cb})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	if n := testing.AllocsPerRun(1000, func() { p.Execute(ctx, fn) }); n != 1 {
		t.Errorf("allocs per call = %v, want 1 (gobreaker's done)", n)
	}
}

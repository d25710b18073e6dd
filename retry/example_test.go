package retry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// A flaky call that succeeds on its third attempt.
func Example() {
	r, err := retry.New(retry.Config{
		Name:            "inventory",
		MaxAttempts:     5,
		InitialInterval: time.Millisecond,
		Jitter:          -1,
		OnRetry: func(ctx context.Context, attempt int, err error, wait time.Duration) {
			fmt.Printf("attempt %d failed (%v); retrying in %v\n", attempt, err, wait)
		},
	})
	if err != nil {
		panic(err)
	}
	err = r.Execute(context.Background(), func(ctx context.Context) error {
		if n := retry.Attempt(ctx); n < 3 {
			return fmt.Errorf("try %d: connection reset", n)
		}
		fmt.Println("attempt 3 succeeded")
		return nil
	})
	fmt.Println("error:", err)
	// Output:
	// attempt 1 failed (try 1: connection reset); retrying in 1ms
	// attempt 2 failed (try 2: connection reset); retrying in 2ms
	// attempt 3 succeeded
	// error: <nil>
}

// Giving up: the error matches ErrExhausted and the last attempt's error.
func ExampleErrExhausted() {
	errRefused := errors.New("connection refused")
	r, _ := retry.New(retry.Config{
		Name:        "db",
		MaxAttempts: 2,
		// Retries without waits.
		NewSchedule: func() backoff.BackOff { return &backoff.ZeroBackOff{} },
	})
	err := r.Execute(context.Background(), func(context.Context) error { return errRefused })
	fmt.Println(err)
	fmt.Println(errors.Is(err, retry.ErrExhausted), errors.Is(err, errRefused))
	// Output:
	// retry "db": gave up after 2 attempts: connection refused
	// true true
}

// A permanent error ends the call at once, with the error itself.
func Example_permanent() {
	errBadRequest := errors.New("400 bad request")
	r, _ := retry.New(retry.Config{})
	calls := 0
	err := r.Execute(context.Background(), func(context.Context) error {
		calls++
		return policy.Permanent(errBadRequest)
	})
	fmt.Println(calls, err, err == errBadRequest)
	// Output:
	// 1 400 bad request true
}

// A schedule of fixed waits, then stop, from github.com/cenkalti/backoff/v4.
// NewSchedule makes one per call, so its state belongs to that call alone.
func ExampleConfig_newSchedule() {
	r, _ := retry.New(retry.Config{
		Name:        "fixed",
		MaxAttempts: 10,
		NewSchedule: func() backoff.BackOff {
			return backoff.WithMaxRetries(backoff.NewConstantBackOff(5*time.Millisecond), 2)
		},
		OnRetry: func(_ context.Context, attempt int, _ error, wait time.Duration) {
			fmt.Printf("attempt %d failed; retrying in %v\n", attempt, wait)
		},
	})
	err := r.Execute(context.Background(), func(context.Context) error { return errors.New("unavailable") })
	fmt.Println(err)
	// Output:
	// attempt 1 failed; retrying in 5ms
	// attempt 2 failed; retrying in 5ms
	// retry "fixed": gave up after 3 attempts: the schedule stopped: unavailable
}

// One Budget shared by two Retries calling the same dependency: with no
// reserve (MinPerSecond -1) and 0.6 of a retry paid for by each call, the first
// failing call cannot retry; with the second call's deposit, it can, once.
func ExampleBudget() {
	budget, err := retry.NewBudget(retry.BudgetConfig{Ratio: 0.6, MinPerSecond: -1})
	if err != nil {
		panic(err)
	}
	zeroWaits := func() backoff.BackOff { return &backoff.ZeroBackOff{} }
	search, _ := retry.New(retry.Config{Name: "search", Budget: budget, NewSchedule: zeroWaits})
	suggest, _ := retry.New(retry.Config{Name: "suggest", Budget: budget, NewSchedule: zeroWaits})
	down := errors.New("503 Service Unavailable")
	for _, r := range []*retry.Retry{search, suggest} {
		attempts := 0
		err := r.Execute(context.Background(), func(context.Context) error {
			attempts++
			return down
		})
		var ee *retry.ExhaustedError
		errors.As(err, &ee)
		fmt.Printf("%d attempt(s), reason %s: %v\n", attempts, ee.Reason, err)
	}
	// Output:
	// 1 attempt(s), reason budget: retry "search": gave up after 1 attempt: the retry budget is spent: 503 Service Unavailable
	// 2 attempt(s), reason budget: retry "suggest": gave up after 2 attempts: the retry budget is spent: 503 Service Unavailable
}

// A caller that runs each attempt itself drives a Loop.
func ExampleRetry_Start() {
	r, err := retry.New(retry.Config{MaxAttempts: 3, InitialInterval: time.Millisecond, Jitter: -1})
	if err != nil {
		panic(err)
	}
	l := r.Start(context.Background())
	for l.Next(func(ctx context.Context) error {
		fmt.Println("attempt", retry.Attempt(ctx))
		return errors.New("unavailable")
	}(l.Attempt())) {
	}
	fmt.Println(errors.Is(l.Err(), retry.ErrExhausted))
	// Output:
	// attempt 1
	// attempt 2
	// attempt 3
	// true
}

package retry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/watertight/watertight/retry"
)

// A flaky call that succeeds on its third attempt.
func Example() {
	r, err := retry.New(retry.Config{
		Name:            "inventory",
		MaxAttempts:     5,
		InitialInterval: time.Millisecond,
		Jitter:          retry.NoJitter,
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
		NewBackOff:  func() backoff.BackOff { return &backoff.ZeroBackOff{} },
	})
	err := r.Execute(context.Background(), func(context.Context) error { return errRefused })
	fmt.Println(err)
	fmt.Println(errors.Is(err, retry.ErrExhausted), errors.Is(err, errRefused))
	// Output:
	// retry "db": gave up after 2 attempts: connection refused
	// true true
}

// A permanent error ends the call at once, with the error itself.
func ExamplePermanent() {
	errBadRequest := errors.New("400 bad request")
	r, _ := retry.New(retry.Config{})
	calls := 0
	err := r.Execute(context.Background(), func(context.Context) error {
		calls++
		return retry.Permanent(errBadRequest)
	})
	fmt.Println(calls, err, err == errBadRequest)
	// Output:
	// 1 400 bad request true
}

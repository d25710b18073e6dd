package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
)

// Hold reads what a response says about the provider's quota.
func ExampleHold() {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	openai := http.Header{}
	openai.Set("x-ratelimit-remaining-requests", "0")
	openai.Set("x-ratelimit-reset-requests", "1m30.5s")
	fmt.Println(ratelimit.Hold(200, openai, now, 0))

	anthropic := http.Header{}
	anthropic.Set("retry-after", "2")
	anthropic.Set("anthropic-ratelimit-output-tokens-remaining", "0")
	anthropic.Set("anthropic-ratelimit-output-tokens-reset", "2026-12-03T12:00:05Z")
	fmt.Println(ratelimit.Hold(429, anthropic, now, 0))

	quotaLeft := http.Header{}
	quotaLeft.Set("x-ratelimit-remaining-requests", "12")
	quotaLeft.Set("x-ratelimit-reset-requests", "6m0s")
	fmt.Println(ratelimit.Hold(200, quotaLeft, now, 0))
	// Output:
	// 1m30.5s
	// 5s
	// 0s
}

// A Limiter shared by every call to a provider: once a response says the
// quota is spent, a call that cannot wait for the reset is rejected at once
// instead of drawing another 429.
func ExampleLimiter() {
	lim, err := ratelimit.New(ratelimit.Config{Name: "openai"})
	if err != nil {
		panic(err)
	}
	// Usually the httppolicy.Transport calls Observe for every response.
	h := http.Header{}
	h.Set("Retry-After", "30")
	lim.Observe(&http.Response{StatusCode: http.StatusTooManyRequests, Header: h})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = lim.Execute(ctx, func(ctx context.Context) error {
		fmt.Println("not reached")
		return nil
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, policy.ErrRejected), errors.Is(err, ratelimit.ErrLimited))
	// Output:
	// ratelimit "openai" rejected the call: throttled
	// true true
}

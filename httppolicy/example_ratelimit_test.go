package httppolicy_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/watertight/watertight/httppolicy"
)

// RateLimitHold reads what a response says about the provider's quota.
func ExampleRateLimitHold() {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	openai := http.Header{}
	openai.Set("x-ratelimit-remaining-requests", "0")
	openai.Set("x-ratelimit-reset-requests", "1m30.5s")
	fmt.Println(httppolicy.RateLimitHold(200, openai, now, 0))

	anthropic := http.Header{}
	anthropic.Set("retry-after", "2")
	anthropic.Set("anthropic-ratelimit-output-tokens-remaining", "0")
	anthropic.Set("anthropic-ratelimit-output-tokens-reset", "2026-12-03T12:00:05Z")
	fmt.Println(httppolicy.RateLimitHold(429, anthropic, now, 0))

	quotaLeft := http.Header{}
	quotaLeft.Set("x-ratelimit-remaining-requests", "12")
	quotaLeft.Set("x-ratelimit-reset-requests", "6m0s")
	fmt.Println(httppolicy.RateLimitHold(200, quotaLeft, now, 0))
	// Output:
	// 1m30.5s
	// 5s
	// 0s
}

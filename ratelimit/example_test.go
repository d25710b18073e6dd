package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
)

// A Limiter shared by every call to a provider: once a response says the
// quota is spent, a call that cannot wait for the reset is rejected at once
// instead of drawing another 429.
func ExampleLimiter() {
	lim, err := ratelimit.New(ratelimit.Config{Name: "openai"})
	if err != nil {
		panic(err)
	}
	// Usually httppolicy.LimiterSignals feeds it every response; here a
	// 429 asked to wait 30 s.
	lim.Observe(ratelimit.Answer{Hold: 30 * time.Second})

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

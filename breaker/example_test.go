package breaker_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/policy"
)

// A breaker that opens on the second failure in a row, then rejects calls
// without running them.
func Example() {
	b, err := breaker.New(breaker.Config{
		Name:                "llm",
		ConsecutiveFailures: 2,
		OnStateChange: func(from, to breaker.State) {
			fmt.Printf("breaker: %v -> %v\n", from, to)
		},
	})
	if err != nil {
		panic(err)
	}
	defer b.Close()

	ctx := context.Background()
	upstream := func(context.Context) error { return errors.New("upstream: 503") }
	for range 3 {
		fmt.Println(b.Execute(ctx, upstream))
	}

	err = b.Execute(ctx, upstream)
	var rej *policy.RejectedError
	if errors.As(err, &rej) {
		fmt.Println("reason:", rej.Reason, errors.Is(err, breaker.ErrOpen), errors.Is(err, policy.ErrRejected))
	}
	// Output:
	// upstream: 503
	// breaker: closed -> open
	// upstream: 503
	// breaker "llm" rejected the call: open
	// reason: open true true
}

// ForceOpen takes a dependency out of service by hand; Reset brings it back
// with fresh counts.
func ExampleBreaker_ForceOpen() {
	b, _ := breaker.New(breaker.Config{Name: "db"})
	defer b.Close()
	ok := func(context.Context) error { return nil }

	b.ForceOpen()
	fmt.Println(b.State(), b.Execute(context.Background(), ok))
	b.Reset()
	fmt.Println(b.State(), b.Execute(context.Background(), ok))
	// Output:
	// open breaker "db" rejected the call: open
	// closed <nil>
}

// A ratio rule: open when at least half of the last minute's calls failed,
// once there were at least 20 of them. Cancellations and rejections from
// policies inside the breaker count neither way.
func ExampleConfig_ratio() {
	b, err := breaker.New(breaker.Config{
		Name:         "search",
		FailureRatio: 0.5,
		MinRequests:  20,
		// Window: 0 means 60s; ConsecutiveFailures: 0 leaves that rule off.
	})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	ctx := context.Background()
	for i := range 20 {
		b.Execute(ctx, func(context.Context) error {
			if i%2 == 1 { // the 20th call fails: the rule is checked on failures
				return errors.New("timeout")
			}
			return nil
		})
	}
	fmt.Println(b.State())
	// Output:
	// open
}

// Update lowers the trip rule of a running breaker; the failures already
// counted stay, so the next failure trips it.
func ExampleBreaker_Update() {
	b, _ := breaker.New(breaker.Config{Name: "llm", ConsecutiveFailures: 5})
	defer b.Close()
	ctx := context.Background()
	upstream := func(context.Context) error { return errors.New("upstream: 503") }
	for range 2 {
		b.Execute(ctx, upstream)
	}

	cfg := b.Config()
	cfg.ConsecutiveFailures = 3
	if err := b.Update(cfg); err != nil {
		panic(err)
	}
	fmt.Println(b.State(), b.Counts().ConsecutiveFailures)
	b.Execute(ctx, upstream)
	fmt.Println(b.State())

	cfg.OpenTimeout = -1
	fmt.Println(b.Update(cfg))
	// Output:
	// closed 2
	// open
	// breaker: Config.OpenTimeout must be >= 0, got -1ns
}

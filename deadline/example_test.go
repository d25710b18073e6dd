package deadline_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/watertight/watertight/deadline"
)

// A Deadline cuts a slow call short: fn sees its ctx done after the
// timeout, and the error says which deadline fired.
func Example() {
	d, err := deadline.New(deadline.Config{Name: "search", Timeout: 20 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	err = d.Execute(context.Background(), func(ctx context.Context) error {
		select {
		case <-time.After(time.Minute): // a slow dependency
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, deadline.ErrExceeded), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// deadline "search": 20ms timeout exceeded: context deadline exceeded
	// true true
}

// The caller's own cancellation is not the Deadline's timeout: it comes
// back as fn returned it.
func ExampleDeadline_Execute() {
	d, err := deadline.New(deadline.Config{
		Name:    "search",
		Timeout: time.Minute,
		OnTimeout: func(ctx context.Context, timeout time.Duration) {
			fmt.Println("timed out after", timeout)
		},
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the caller gives up
	err = d.Execute(ctx, func(ctx context.Context) error { return ctx.Err() })
	fmt.Println(err, errors.Is(err, deadline.ErrExceeded))

	err = d.Execute(context.Background(), func(ctx context.Context) error { return nil })
	fmt.Println(err)
	// Output:
	// context canceled false
	// <nil>
}

func ExampleNew() {
	_, err := deadline.New(deadline.Config{Name: "search"})
	fmt.Println(err)
	// Output:
	// deadline: Config.Timeout must be > 0, got 0s
}

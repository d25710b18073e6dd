package adaptive_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/policy"
)

// A limiter starts with a probe of the dependency's no-load latency, at
// most 3 calls at once; with no queue, a call beyond the limit is rejected
// at once.
func Example() {
	l, err := adaptive.New(adaptive.Config{Name: "llm", MaxLimit: 2})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	fmt.Println("limit:", l.Limit()) // min(3, InitialLimit), with InitialLimit 20 clamped to MaxLimit

	release, done := make(chan struct{}), make(chan error)
	for range 2 {
		started := make(chan struct{})
		go func() {
			done <- l.Execute(context.Background(), func(ctx context.Context) error {
				close(started)
				<-release // a slow upstream
				return nil
			})
		}()
		<-started
	}

	err = l.Execute(context.Background(), func(ctx context.Context) error {
		fmt.Println("not reached")
		return nil
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, adaptive.ErrFull), errors.Is(err, policy.ErrRejected))
	var re *policy.RejectedError
	if errors.As(err, &re) {
		fmt.Println(re.Kind, re.Name, re.Reason)
	}
	fmt.Println("active:", l.Active())

	close(release)
	fmt.Println(<-done, <-done, "active:", l.Active())
	// Output:
	// limit: 2
	// adaptive "llm" rejected the call: full
	// true true
	// adaptive llm full
	// active: 2
	// <nil> <nil> active: 0
}

// New names the first invalid field.
func ExampleNew_invalid() {
	_, err := adaptive.New(adaptive.Config{MinLimit: 5, MaxLimit: 3})
	fmt.Println(err)
	// Output:
	// adaptive: Config.MaxLimit must be >= MinLimit (5), got 3
}

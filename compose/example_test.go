package compose_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// A pipeline for one dependency: at most 10 calls in flight and 20 waiting
// up to a second, 5 s for the whole call, 3 attempts of at most 2 s each,
// and a breaker that opens after 5 consecutive failures.
func Example() {
	bh, _ := bulkhead.New(bulkhead.Config{Name: "llm", Limit: 10, MaxQueue: 20, MaxWait: time.Second})
	dl, _ := deadline.New(deadline.Config{Name: "llm", Timeout: 5 * time.Second})
	rt, _ := retry.New(retry.Config{Name: "llm", MaxAttempts: 3})
	br, _ := breaker.New(breaker.Config{Name: "llm", ConsecutiveFailures: 5})
	at, _ := deadline.New(deadline.Config{Name: "llm-attempt", Timeout: 2 * time.Second})
	llm, err := compose.New("llm", compose.Policies{Bulkhead: bh, Deadline: dl, Retry: rt, Breaker: br, Attempt: at})
	if err != nil {
		fmt.Println(err)
		return
	}

	answer, err := policy.Do(context.Background(), llm, func(ctx context.Context) (string, error) {
		return fmt.Sprintf("answered on attempt %d", retry.Attempt(ctx)), nil
	})
	fmt.Println(answer, err)

	// Once the breaker is open, calls are refused at once, and the refusal
	// says who refused and why.
	br.ForceOpen()
	err = llm.Execute(context.Background(), func(ctx context.Context) error { return nil })
	var rej *policy.RejectedError
	if errors.As(err, &rej) {
		fmt.Println(errors.Is(err, policy.ErrRejected), rej.Kind, rej.Name, rej.Reason)
	}
	// Output:
	// answered on attempt 1 <nil>
	// true breaker llm open
}

// compose.New checks the slots against each other.
func ExampleNew_attemptLongerThanDeadline() {
	dl, _ := deadline.New(deadline.Config{Name: "call", Timeout: time.Second})
	at, _ := deadline.New(deadline.Config{Name: "attempt", Timeout: 2 * time.Second})
	_, err := compose.New("api", compose.Policies{Deadline: dl, Attempt: at})
	fmt.Println(err)
	// Output: compose: Policies.Attempt timeout 2s is longer than Policies.Deadline timeout 1s
}

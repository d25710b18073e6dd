package fallback_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/fallback"
)

// OpenAI, else Anthropic: the primary's breaker is open, so the call moves
// on to the secondary.
func Example() {
	openaiBreaker, _ := breaker.New(breaker.Config{Name: "openai"})
	defer openaiBreaker.Close()
	openaiBreaker.ForceOpen() // as after a run of failures

	cfg := fallback.Config{
		Name: "chat",
		OnFallback: func(ctx context.Context, from, to string, err error) {
			fmt.Printf("%s -> %s: %v\n", from, to, err)
		},
	}
	answer, err := fallback.Do(context.Background(), cfg, []fallback.Alternative[string]{
		{Name: "openai", Policy: openaiBreaker, Fn: func(ctx context.Context) (string, error) {
			return "from openai", nil
		}},
		{Name: "anthropic", Fn: func(ctx context.Context) (string, error) {
			return "from anthropic", nil
		}},
	})
	fmt.Println(answer, err)
	// Output:
	// openai -> anthropic: breaker "openai" rejected the call: open
	// from anthropic <nil>
}

// A streamed answer that breaks after its first chunk is not started again
// on another provider: the caller already has part of it.
func ExampleMarkDelivered() {
	errStream := errors.New("stream broken")
	_, err := fallback.Do(context.Background(), fallback.Config{
		ShouldFallback: func(error) bool { return true },
	}, []fallback.Alternative[string]{
		{Name: "openai", Fn: func(ctx context.Context) (string, error) {
			fmt.Println("chunk: Hel")
			fallback.MarkDelivered(ctx)
			return "", errStream
		}},
		{Name: "anthropic", Fn: func(ctx context.Context) (string, error) {
			fmt.Println("chunk: Hello")
			return "Hello", nil
		}},
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, errStream))
	// Output:
	// chunk: Hel
	// fallback: failed after delivering part of the answer, 1 untried: openai: stream broken
	// true
}

package redisstate_test

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/watertight/watertight/redisstate"
)

// A Budget is built without contacting Redis, so an invalid Config fails at
// once, naming the field. (An example that ran calls would need a Redis
// server and could not promise its output; the tests start their own.)
func ExampleNewBudget() {
	client := redisstate.NewClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}})
	defer client.Close()

	_, err := redisstate.NewBudget(redisstate.BudgetConfig{
		Name:  "llm",
		Redis: redisstate.Redis{Client: client},
	})
	fmt.Println(err)

	b, err := redisstate.NewBudget(redisstate.BudgetConfig{
		Name:     "llm",
		Limit:    50, // the provider's concurrency limit for the whole API key
		Fallback: redisstate.LocalShare,
		Redis:    redisstate.Redis{Client: client},
	})
	fmt.Println(b.Limit(), err)
	b.Close()
	// Output:
	// redisstate: Config.Limit must be >= 1, got 0
	// 50 <nil>
}

// A client made for go-redis's defaults lets a frozen Redis hang a call
// past its deadline; New refuses it.
func ExampleNewClient() {
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer plain.Close()
	_, err := redisstate.NewBudget(redisstate.BudgetConfig{Name: "llm", Limit: 50, Redis: redisstate.Redis{Client: plain}})
	fmt.Println(err != nil)
	// Output:
	// true
}

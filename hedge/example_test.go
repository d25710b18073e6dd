package hedge_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/watertight/watertight/hedge"
)

// The first attempt is slow, so after 10ms a second starts beside it and
// wins; the first is canceled with ErrLost, and Do returns the winner's
// value. With a policy (a pipeline) in place of nil, each attempt would
// run through it on its own.
func ExampleDo() {
	h, err := hedge.New(hedge.Config{Name: "search", Delay: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	lost := make(chan bool, 1)
	v, err := hedge.Do(context.Background(), h, nil, func(ctx context.Context) (string, error) {
		if hedge.Attempt(ctx) == 1 {
			<-ctx.Done() // a slow replica, until canceled
			lost <- errors.Is(context.Cause(ctx), hedge.ErrLost)
			return "", ctx.Err()
		}
		return "from attempt 2", nil
	})
	fmt.Println(v, err)
	fmt.Println("attempt 1 canceled as the loser:", <-lost)
	// Output:
	// from attempt 2 <nil>
	// attempt 1 canceled as the loser: true
}

// An invalid Config fails at New, and the error names the field.
func ExampleNew_invalid() {
	_, err := hedge.New(hedge.Config{MaxHedges: -1})
	fmt.Println(err)
	// Output:
	// hedge: Config.MaxHedges must be in [1, 100], got -1
}

package route_test

import (
	"context"
	"fmt"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/route"
)

// Two deployments of one API, each with its own breaker. While eu's
// breaker is open, every call goes to us, and none is refused.
func Example() {
	eu, _ := breaker.New(breaker.Config{Name: "chat.eu"})
	defer eu.Close()
	r, err := route.New(route.Config{
		Name:      "chat",
		Endpoints: []route.Endpoint{{Name: "eu", Breaker: eu}, {Name: "us"}},
	})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	p, _ := compose.New("chat", compose.Policies{Route: r})

	eu.ForceOpen()
	for range 3 {
		reply, err := route.Do(context.Background(), p, func(ctx context.Context, ep route.Picked) (string, error) {
			return "answered by " + ep.Name, nil
		})
		fmt.Println(reply, err)
	}
	// Output:
	// answered by us <nil>
	// answered by us <nil>
	// answered by us <nil>
}

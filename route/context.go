package route

import (
	"context"
	"sync"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// Picked is the endpoint an attempt runs against: its index in
// Config.Endpoints and its name. The zero value, with an empty Name, is
// no endpoint.
type Picked struct {
	Index int
	Name  string
}

// EndpointOf returns the endpoint the attempt of ctx runs against, and
// whether it runs against one: the context of fn in a pipeline with a
// Route slot does.
func EndpointOf(ctx context.Context) (Picked, bool) {
	if p, ok := stage.Tag(ctx).(*Picked); ok {
		return *p, true
	}
	return Picked{}, false
}

// Do runs fn through p and returns fn's value and error, or p's error.
// fn gets the endpoint its attempt runs against, as [EndpointOf] gives
// it: the zero Picked if p routes nothing. Do returns the value of fn's
// first run that returned a nil error, else of its last run, if any. fn
// may run concurrently with itself under a hedging policy.
func Do[T any](ctx context.Context, p policy.Policy, fn func(ctx context.Context, ep Picked) (T, error)) (T, error) {
	var (
		mu  sync.Mutex
		v   T
		won bool
	)
	err := p.Execute(ctx, func(ctx context.Context) error {
		ep, _ := EndpointOf(ctx)
		got, err := fn(ctx, ep)
		mu.Lock()
		if !won {
			v, won = got, err == nil
		}
		mu.Unlock()
		return err
	})
	mu.Lock()
	defer mu.Unlock()
	return v, err
}

package redisstate_test

import (
	"context"
	"testing"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/redisstate"
	"github.com/watertight/watertight/route"
)

// TestSharedBreakerEndpoint: an endpoint's breaker is a SharedBreaker, so
// one replica's failures on it take it out of every replica's routing, and
// the other replica's calls all go to the other endpoint, none refused.
func TestSharedBreakerEndpoint(t *testing.T) {
	s := startRedis(t)
	eu := replicas(t, 2, s.Addr(), redisstate.BreakerConfig{
		Breaker:      breaker.Config{Name: "chat.eu", ConsecutiveFailures: 3, OpenTimeout: time.Minute},
		PollInterval: 50 * time.Millisecond,
	})
	var pipes []*compose.Pipeline
	for i := range 2 {
		r, err := route.New(route.Config{Name: "chat", OutlierFactor: -1,
			Endpoints: []route.Endpoint{{Name: "eu", Breaker: eu[i]}, {Name: "us"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		p, err := compose.New("chat", compose.Policies{Route: r})
		if err != nil {
			t.Fatal(err)
		}
		pipes = append(pipes, p)
	}
	// Replica 0 sees eu fail until its breaker opens.
	for eu[0].State() != breaker.Open {
		pipes[0].Execute(context.Background(), func(ctx context.Context) error {
			if ep, _ := route.EndpointOf(ctx); ep.Name == "eu" {
				return errBoom
			}
			return nil
		})
	}
	eventually(t, patience, "replica 1's eu breaker opens", func() bool { return eu[1].State() == breaker.Open })
	for range 50 {
		err := pipes[1].Execute(context.Background(), func(ctx context.Context) error {
			if ep, _ := route.EndpointOf(ctx); ep.Name == "eu" {
				t.Error("replica 1 sent a call to eu after the fleet opened its breaker")
			}
			return nil
		})
		if err != nil {
			t.Fatalf("replica 1: %v; want us to answer", err)
		}
	}
}

package grpcpolicy_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/retry"
)

// benchUnary measures one unary call over loopback TCP with the dial
// options dopts (nil: a bare call) and the server options sopts.
func benchUnary(b *testing.B, sopts []grpc.ServerOption, dopts []grpc.DialOption) {
	e := newEnv(b, true, &service{}, sopts, dopts)
	ctx := context.Background()
	in := &frame{b: []byte("ping")}
	out := new(frame)
	if err := e.conn.Invoke(ctx, mCall, in, out); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := e.conn.Invoke(ctx, mCall, in, out); err != nil {
			b.Fatal(err)
		}
	}
}

// benchPipeline is the pipeline of a typical dependency: bulkhead,
// deadline, retry, breaker and attempt deadline.
func benchPipeline(b *testing.B) *compose.Pipeline {
	return newPipeline(b, compose.Policies{
		Bulkhead: newBulkhead(b, "dep", 1000, 0),
		Deadline: newDeadline(b, "dep", 10e9),
		Retry:    newRetry(b, retry.Config{MaxAttempts: 3}),
		Breaker:  newBreaker(b, 5),
		Attempt:  newDeadline(b, "attempt", 5e9),
	})
}

// The reference: a bare unary call on loopback TCP.
func BenchmarkUnaryBare(b *testing.B) { benchUnary(b, nil, nil) }

// The client interceptor around the full pipeline.
func BenchmarkUnaryClientPipeline(b *testing.B) {
	c, err := grpcpolicy.NewClient(grpcpolicy.ClientConfig{Policy: benchPipeline(b)})
	if err != nil {
		b.Fatal(err)
	}
	benchUnary(b, nil, c.DialOptions())
}

// The server interceptor around the full pipeline.
func BenchmarkUnaryServerPipeline(b *testing.B) {
	s, err := grpcpolicy.NewServer(grpcpolicy.ServerConfig{Policy: benchPipeline(b)})
	if err != nil {
		b.Fatal(err)
	}
	benchUnary(b, s.ServerOptions(), nil)
}

// The interceptor alone, without a network: an invoker that returns at
// once, so that what is measured is the interceptor and the pipeline.
func BenchmarkUnaryInterceptorOnly(b *testing.B) {
	for _, tc := range []struct {
		name string
		pipe bool
	}{{"bulkhead", false}, {"pipeline", true}} {
		b.Run(tc.name, func(b *testing.B) {
			var c *grpcpolicy.Client
			var err error
			if tc.pipe {
				c, err = grpcpolicy.NewClient(grpcpolicy.ClientConfig{Policy: benchPipeline(b)})
			} else {
				c, err = grpcpolicy.NewClient(grpcpolicy.ClientConfig{Policy: newBulkhead(b, "dep", 1000, 0)})
			}
			if err != nil {
				b.Fatal(err)
			}
			icpt := c.UnaryInterceptor()
			invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := icpt(ctx, mCall, nil, nil, nil, invoker); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

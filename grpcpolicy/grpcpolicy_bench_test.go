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
// options dopts (nil: a bare call) and the server options sopts, in wall
// time and in the process's CPU time per call (cpu-ns/op).
func benchUnary(b *testing.B, sopts []grpc.ServerOption, dopts []grpc.DialOption) {
	e := newEnv(b, true, &service{}, sopts, dopts)
	ctx := context.Background()
	in := &frame{b: []byte("ping")}
	out := new(frame)
	if err := e.conn.Invoke(ctx, mCall, in, out); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0, ok := processCPU()
	for b.Loop() {
		if err := e.conn.Invoke(ctx, mCall, in, out); err != nil {
			b.Fatal(err)
		}
	}
	// Client and server run in this process: their CPU time per call, both
	// sides included, is steadier than wall time on a shared machine.
	if cpu1, ok1 := processCPU(); ok && ok1 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
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

// BenchmarkUnary is one unary call on loopback TCP: bare (the reference),
// then through the client interceptor, the server interceptor, or both.
// Compare with benchstat -col /via.
func BenchmarkUnary(b *testing.B) {
	client := func(b *testing.B, full bool) []grpc.DialOption {
		var c *grpcpolicy.Client
		var err error
		if full {
			c, err = grpcpolicy.NewClient(grpcpolicy.ClientConfig{Policy: benchPipeline(b)})
		} else {
			c, err = grpcpolicy.NewClient(grpcpolicy.ClientConfig{Policy: newBulkhead(b, "dep", 1000, 0)})
		}
		if err != nil {
			b.Fatal(err)
		}
		return c.DialOptions()
	}
	server := func(b *testing.B) []grpc.ServerOption {
		s, err := grpcpolicy.NewServer(grpcpolicy.ServerConfig{Policy: benchPipeline(b)})
		if err != nil {
			b.Fatal(err)
		}
		return s.ServerOptions()
	}
	b.Run("via=bare", func(b *testing.B) { benchUnary(b, nil, nil) })
	b.Run("via=client-bulkhead", func(b *testing.B) { benchUnary(b, nil, client(b, false)) })
	b.Run("via=client-pipeline", func(b *testing.B) { benchUnary(b, nil, client(b, true)) })
	b.Run("via=server-pipeline", func(b *testing.B) { benchUnary(b, server(b), nil) })
	b.Run("via=both-pipeline", func(b *testing.B) { benchUnary(b, server(b), client(b, true)) })
}

// The interceptor alone, without a network: an invoker that returns at
// once, so that what is measured is the interceptor and its policy. The
// reference, direct, is the same policies' Execute with an fn that
// returns at once: the difference is the interceptor's own cost.
func BenchmarkUnaryInterceptorOnly(b *testing.B) {
	ctx := context.Background()
	nop := func(context.Context) error { return nil }
	b.Run("policy=bulkhead/via=direct", func(b *testing.B) {
		bh := newBulkhead(b, "dep", 1000, 0)
		b.ReportAllocs()
		for b.Loop() {
			if err := bh.Execute(ctx, nop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("policy=pipeline/via=direct", func(b *testing.B) {
		pl := benchPipeline(b)
		b.ReportAllocs()
		for b.Loop() {
			if err := pl.Execute(ctx, nop); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tc := range []struct {
		name string
		pipe bool
	}{{"policy=bulkhead/via=interceptor", false}, {"policy=pipeline/via=interceptor", true}} {
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
			b.ReportAllocs()
			for b.Loop() {
				if err := icpt(ctx, mCall, nil, nil, nil, invoker); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStream is one server-streaming call on loopback TCP (a request,
// one answer, the end), bare and through the client interceptor with a
// bulkhead: the cost of holding the slot for the stream's life (a
// goroutine running Execute, the hand-over).
func BenchmarkStream(b *testing.B) {
	run := func(b *testing.B, dopts []grpc.DialOption) {
		e := newEnv(b, true, &service{}, nil, dopts)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			cs, err := e.openWatch(ctx, "x")
			if err != nil {
				b.Fatal(err)
			}
			if got, err := recvAll(cs); err != nil || len(got) != 1 {
				b.Fatal(got, err)
			}
		}
	}
	b.Run("via=bare", func(b *testing.B) { run(b, nil) })
	b.Run("via=client-bulkhead", func(b *testing.B) {
		c, err := grpcpolicy.NewClient(grpcpolicy.ClientConfig{Policy: newBulkhead(b, "dep", 1000, 0)})
		if err != nil {
			b.Fatal(err)
		}
		run(b, c.DialOptions())
	})
}

// The server interceptor alone, without a network: a handler that returns
// at once. Compare with the same policies' Execute in
// BenchmarkUnaryInterceptorOnly (policy=*/via=direct).
func BenchmarkServerInterceptorOnly(b *testing.B) {
	ctx := context.Background()
	info := &grpc.UnaryServerInfo{FullMethod: mCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, tc := range []struct {
		name string
		pipe bool
	}{{"policy=bulkhead", false}, {"policy=pipeline", true}} {
		b.Run(tc.name, func(b *testing.B) {
			var s *grpcpolicy.Server
			var err error
			if tc.pipe {
				s, err = grpcpolicy.NewServer(grpcpolicy.ServerConfig{Policy: benchPipeline(b)})
			} else {
				s, err = grpcpolicy.NewServer(grpcpolicy.ServerConfig{Policy: newBulkhead(b, "dep", 1000, 0)})
			}
			if err != nil {
				b.Fatal(err)
			}
			icpt := s.UnaryInterceptor()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := icpt(ctx, nil, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package grpcpolicy_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/policy"
)

// The interceptors' own allocations per unary call, with a bulkhead (which
// allocates nothing): none for the client (its calls are recycled), one
// for the server (the call, which is also Execute's context; why it is
// not recycled is in server.go). The server's was two: the call and a
// bound method value.
func TestInterceptorAllocs(t *testing.T) {
	ctx := context.Background()
	s := newServer(t, grpcpolicy.ServerConfig{Policy: newBulkhead(t, "dep", 10, 0)})
	sicpt := s.UnaryInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: mCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	if n := testing.AllocsPerRun(200, func() {
		if _, err := sicpt(ctx, nil, info, handler); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Errorf("server interceptor: %v allocations per call, want 1", n)
	}

	if raceEnabled {
		return
	}
	c := newClient(t, grpcpolicy.ClientConfig{Policy: newBulkhead(t, "dep", 10, 0)})
	cicpt := c.UnaryInterceptor()
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	if n := testing.AllocsPerRun(200, func() {
		if err := cicpt(ctx, mCall, nil, nil, nil, invoker); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("client interceptor: %v allocations per call, want 0", n)
	}
}

// A policy that calls fn with a context of its own, not derived from the
// one Execute got (package policy's contract forbids it), gets an error
// saying so, and the client UNAVAILABLE; the handler does not run.
func TestServerForeignContext(t *testing.T) {
	ran := false
	s := newServer(t, grpcpolicy.ServerConfig{Policy: foreignCtx{}})
	handler := func(context.Context, any) (any, error) { ran = true; return nil, nil }
	_, err := s.UnaryInterceptor()(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: mCall}, handler)
	if ran || err == nil {
		t.Fatalf("ran %v, err %v; want the handler not run and an error", ran, err)
	}
}

type foreignCtx struct{}

func (foreignCtx) Execute(_ context.Context, fn policy.Func) error {
	return fn(context.Background())
}

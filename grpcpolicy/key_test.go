package grpcpolicy_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/policy"
)

// seenKeys is a policy that records the key each call carries.
type seenKeys struct {
	mu   sync.Mutex
	keys []string
}

func (s *seenKeys) Execute(ctx context.Context, fn policy.Func) error {
	s.mu.Lock()
	s.keys = append(s.keys, policy.KeyOf(ctx))
	s.mu.Unlock()
	return fn(ctx)
}

// TestServerKey: ServerConfig.Key keys each call from its context and
// method, for the policy and the handler; an empty key leaves the call
// unkeyed.
func TestServerKey(t *testing.T) {
	seen := &seenKeys{}
	srv, err := grpcpolicy.NewServer(grpcpolicy.ServerConfig{Policy: seen, Key: func(ctx context.Context, method string) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("tenant"); len(v) == 1 {
			return v[0] + " " + method
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := grpcpolicy.NewClient(grpcpolicy.ClientConfig{Policy: direct{}})
	if err != nil {
		t.Fatal(err)
	}
	var handler []string
	svc := &service{unary: func(ctx context.Context, _ string, in []byte) ([]byte, error) {
		handler = append(handler, policy.KeyOf(ctx))
		return in, nil
	}}
	e := newEnv(t, true, svc, srv.ServerOptions(), cli.DialOptions())
	if _, err := e.call(metadata.AppendToOutgoingContext(context.Background(), "tenant", "acme"), mCall, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.call(context.Background(), mCall, "x"); err != nil {
		t.Fatal(err)
	}
	want := "acme " + mCall
	if len(seen.keys) != 2 || seen.keys[0] != want || seen.keys[1] != "" || len(handler) != 2 || handler[0] != want {
		t.Errorf("the policy saw keys %q, the handler %q; want %q then none", seen.keys, handler, want)
	}
}

// ctxStream is a server stream that has only a context.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

// TestServerKeyStreamAndContext: a stream's key reaches the policy and the
// handler as a unary call's does, and a call for which Key gives no key
// keeps the one its context carries (set by an interceptor before).
func TestServerKeyStreamAndContext(t *testing.T) {
	seen := &seenKeys{}
	srv, err := grpcpolicy.NewServer(grpcpolicy.ServerConfig{Policy: seen, Key: func(ctx context.Context, _ string) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("tenant"); len(v) == 1 {
			return v[0]
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	var handler []string
	unary := func(ctx context.Context, _ any) (any, error) {
		handler = append(handler, policy.KeyOf(ctx))
		return nil, nil
	}
	stream := func(_ any, ss grpc.ServerStream) error {
		handler = append(handler, policy.KeyOf(ss.Context()))
		return nil
	}
	tenant := metadata.NewIncomingContext(context.Background(), metadata.Pairs("tenant", "acme"))
	outer := policy.WithKey(context.Background(), "outer")
	for _, ctx := range []context.Context{tenant, outer} {
		if _, err := srv.UnaryInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: mCall}, unary); err != nil {
			t.Fatal(err)
		}
		if err := srv.StreamInterceptor()(nil, ctxStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: mCall}, stream); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"acme", "acme", "outer", "outer"}
	if !slices.Equal(seen.keys, want) || !slices.Equal(handler, want) {
		t.Errorf("the policy saw keys %q, the handler %q; want %q", seen.keys, handler, want)
	}
}

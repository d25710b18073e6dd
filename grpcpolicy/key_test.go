package grpcpolicy_test

import (
	"context"
	"sync"
	"testing"

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

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

// seenPriorities records the priority each handler and each policy run saw.
type seenPriorities struct {
	mu      sync.Mutex
	handler []policy.Priority
	policy  []policy.Priority
}

func (s *seenPriorities) add(to *[]policy.Priority, ctx context.Context) {
	s.mu.Lock()
	*to = append(*to, policy.PriorityOf(ctx))
	s.mu.Unlock()
}

// Execute records the priority the policy sees, then runs fn.
func (s *seenPriorities) Execute(ctx context.Context, fn policy.Func) error {
	s.add(&s.policy, ctx)
	return fn(ctx)
}

// priorityEnv starts a server whose handlers and policy record priorities,
// with cfg's priority fields, and a client that propagates the priority.
func priorityEnv(t *testing.T, cfg grpcpolicy.ServerConfig, propagate bool) (*env, *seenPriorities) {
	seen := &seenPriorities{}
	cfg.Policy = seen
	srv, err := grpcpolicy.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := grpcpolicy.NewClient(grpcpolicy.ClientConfig{Policy: direct{}, PropagatePriority: propagate})
	if err != nil {
		t.Fatal(err)
	}
	svc := &service{unary: func(ctx context.Context, _ string, in []byte) ([]byte, error) {
		seen.add(&seen.handler, ctx)
		return in, nil
	}}
	return newEnv(t, true, svc, srv.ServerOptions(), cli.DialOptions()), seen
}

// direct runs fn as it is.
type direct struct{}

func (direct) Execute(ctx context.Context, fn policy.Func) error { return fn(ctx) }

func critical() context.Context {
	return policy.WithPriority(context.Background(), policy.PriorityCritical)
}

func checkSeen(t *testing.T, seen *seenPriorities, want policy.Priority) {
	t.Helper()
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for _, got := range [][]policy.Priority{seen.handler, seen.policy} {
		if len(got) != 1 || got[0] != want {
			t.Fatalf("handler saw %v, policy saw %v; want [%v] each", seen.handler, seen.policy, want)
		}
	}
}

func TestServerIgnoresPriorityOfUntrustedClient(t *testing.T) {
	e, seen := priorityEnv(t, grpcpolicy.ServerConfig{}, true)
	if _, err := e.call(critical(), mCall, "x"); err != nil {
		t.Fatal(err)
	}
	checkSeen(t, seen, policy.PriorityDefault)
}

func TestServerPriorityFromItsOwnFunction(t *testing.T) {
	e, seen := priorityEnv(t, grpcpolicy.ServerConfig{
		Priority: func(_ context.Context, method string) policy.Priority {
			if method == mCall {
				return policy.PrioritySheddable
			}
			return policy.PriorityDefault
		},
	}, true)
	// The client's critical is not trusted: the server's function decides.
	if _, err := e.call(critical(), mCall, "x"); err != nil {
		t.Fatal(err)
	}
	checkSeen(t, seen, policy.PrioritySheddable)
}

func TestServerUsesPriorityOfTrustedClient(t *testing.T) {
	e, seen := priorityEnv(t, grpcpolicy.ServerConfig{
		Priority:      func(context.Context, string) policy.Priority { return policy.PrioritySheddable },
		TrustPriority: func(context.Context, string) bool { return true },
	}, true)
	if _, err := e.call(critical(), mCall, "x"); err != nil {
		t.Fatal(err)
	}
	checkSeen(t, seen, policy.PriorityCritical)
}

func TestServerIgnoresUnknownPriorityOfTrustedClient(t *testing.T) {
	e, seen := priorityEnv(t, grpcpolicy.ServerConfig{
		TrustPriority: func(context.Context, string) bool { return true },
	}, false)
	ctx := metadata.AppendToOutgoingContext(context.Background(), grpcpolicy.PriorityKey, "urgent")
	if _, err := e.call(ctx, mCall, "x"); err != nil {
		t.Fatal(err)
	}
	checkSeen(t, seen, policy.PriorityDefault)
}

func TestServerTreatsUnknownPriorityOfItsFunctionAsDefault(t *testing.T) {
	e, seen := priorityEnv(t, grpcpolicy.ServerConfig{
		Priority: func(context.Context, string) policy.Priority { return 9 },
	}, false)
	if _, err := e.call(context.Background(), mCall, "x"); err != nil {
		t.Fatal(err)
	}
	checkSeen(t, seen, policy.PriorityDefault)
}

func TestClientSendsPriorityOnlyWhenAsked(t *testing.T) {
	trust := grpcpolicy.ServerConfig{TrustPriority: func(context.Context, string) bool { return true }}
	e, seen := priorityEnv(t, trust, false)
	if _, err := e.call(critical(), mCall, "x"); err != nil {
		t.Fatal(err)
	}
	checkSeen(t, seen, policy.PriorityDefault)
}

func TestStreamHandlerSeesPriority(t *testing.T) {
	seen := &seenPriorities{}
	srv, err := grpcpolicy.NewServer(grpcpolicy.ServerConfig{
		Policy:        seen,
		TrustPriority: func(context.Context, string) bool { return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := grpcpolicy.NewClient(grpcpolicy.ClientConfig{Policy: direct{}, PropagatePriority: true})
	if err != nil {
		t.Fatal(err)
	}
	svc := &service{stream: func(_ string, ss grpc.ServerStream) error {
		seen.add(&seen.handler, ss.Context())
		return echoStream("", ss)
	}}
	e := newEnv(t, true, svc, srv.ServerOptions(), cli.DialOptions())
	ctx, cancel := context.WithCancel(policy.WithPriority(context.Background(), policy.PrioritySheddable))
	defer cancel()
	st, err := e.conn.NewStream(ctx, &serviceDesc.Streams[1], mChat)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&frame{b: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := st.RecvMsg(new(frame)); err != nil {
		t.Fatal(err)
	}
	st.CloseSend()
	st.RecvMsg(new(frame))
	checkSeen(t, seen, policy.PrioritySheddable)
}

// Propagation replaces a priority already in the outgoing metadata (one
// forwarded from an inbound call, say), and a default call sends none.
func TestClientReplacesForwardedPriority(t *testing.T) {
	trust := grpcpolicy.ServerConfig{TrustPriority: func(context.Context, string) bool { return true }}
	e, seen := priorityEnv(t, trust, true)
	forwarded := metadata.AppendToOutgoingContext(context.Background(), grpcpolicy.PriorityKey, "critical")
	if _, err := e.call(forwarded, mCall, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.call(policy.WithPriority(forwarded, policy.PrioritySheddable), mCall, "x"); err != nil {
		t.Fatal(err)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if want := []policy.Priority{policy.PriorityDefault, policy.PrioritySheddable}; !slices.Equal(seen.handler, want) {
		t.Fatalf("handler saw %v; want %v", seen.handler, want)
	}
}

// Metadata keys match in any spelling: a forwarded priority under a key
// that is not lower case is replaced, or removed on a default call.
func TestClientReplacesForwardedPriorityInAnySpelling(t *testing.T) {
	trust := grpcpolicy.ServerConfig{TrustPriority: func(context.Context, string) bool { return true }}
	for _, key := range []string{"Watertight-Priority", "WATERTIGHT-PRIORITY", "wAtErTiGhT-pRiOrItY"} {
		e, seen := priorityEnv(t, trust, true)
		forwarded := metadata.NewOutgoingContext(context.Background(), metadata.MD{key: {"critical"}})
		if _, err := e.call(forwarded, mCall, "x"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.call(policy.WithPriority(forwarded, policy.PrioritySheddable), mCall, "x"); err != nil {
			t.Fatal(err)
		}
		seen.mu.Lock()
		if want := []policy.Priority{policy.PriorityDefault, policy.PrioritySheddable}; !slices.Equal(seen.handler, want) {
			t.Errorf("%s: handler saw %v; want %v", key, seen.handler, want)
		}
		seen.mu.Unlock()
	}
}

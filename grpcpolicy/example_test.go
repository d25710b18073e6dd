package grpcpolicy_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/retry"
)

// serveHealth starts grpc-go's health service on an in-memory listener
// with the server options opts, and returns a connection to it, with the
// dial options dopts, and a function that stops both.
func serveHealth(opts []grpc.ServerOption, dopts []grpc.DialOption) (*grpc.ClientConn, func()) {
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	dopts = append(dopts,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	conn, err := grpc.NewClient("passthrough:///health", dopts...)
	if err != nil {
		panic(err)
	}
	return conn, func() { conn.Close(); srv.Stop() }
}

// A client whose calls to one dependency go through a pipeline: at most 10
// in flight, 3 attempts, a breaker. The server sheds the first call with
// UNAVAILABLE and a pushback of 20ms: the retry waits exactly that long.
func Example() {
	bh, _ := bulkhead.New(bulkhead.Config{Name: "inventory", Limit: 10})
	rt, _ := retry.New(retry.Config{Name: "inventory", MaxAttempts: 3,
		OnRetry: func(_ context.Context, attempt int, err error, wait time.Duration) {
			fmt.Printf("attempt %d: %v; next in %v\n", attempt, status.Code(err), wait)
		}})
	br, _ := breaker.New(breaker.Config{Name: "inventory", ConsecutiveFailures: 5})
	pipe, _ := compose.New("inventory", compose.Policies{Bulkhead: bh, Retry: rt, Breaker: br})
	client, err := grpcpolicy.NewClient(grpcpolicy.ClientConfig{Policy: pipe})
	if err != nil {
		fmt.Println(err)
		return
	}

	var calls atomic.Int64
	shedFirst := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if calls.Add(1) == 1 {
			grpc.SetTrailer(ctx, metadata.Pairs(grpcpolicy.PushbackKey, "20"))
			return nil, status.Error(codes.Unavailable, "overloaded")
		}
		return h(ctx, req)
	}
	conn, stop := serveHealth([]grpc.ServerOption{grpc.UnaryInterceptor(shedFirst)}, client.DialOptions())
	defer stop()

	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println(resp.GetStatus(), err)
	// Output:
	// attempt 1: Unavailable; next in 20ms
	// SERVING <nil>
}

// A server that sheds load: while its breaker is open (or its bulkhead
// full), every call is answered at once with UNAVAILABLE and a pushback
// trailer, and the handler never runs.
func ExampleNewServer() {
	br, _ := breaker.New(breaker.Config{Name: "health"})
	s, err := grpcpolicy.NewServer(grpcpolicy.ServerConfig{Policy: br, Pushback: 250 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	conn, stop := serveHealth(s.ServerOptions(), nil)
	defer stop()

	br.ForceOpen()
	var trailer metadata.MD
	_, err = healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	fmt.Println(status.Code(err), trailer.Get(grpcpolicy.PushbackKey))
	// Output: Unavailable [250]
}

// A bad configuration is refused at construction, with the field named.
func ExampleNewClient_invalid() {
	_, err := grpcpolicy.NewClient(grpcpolicy.ClientConfig{})
	fmt.Println(err)
	// Output: grpcpolicy: ClientConfig.Policy is nil and ClientConfig.Methods is empty: nothing to guard
}

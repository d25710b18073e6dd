package grpcpolicy_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/retry"
)

// frame is the message of the test service: raw bytes, with a codec that
// needs no generated code.
type frame struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return append([]byte(nil), f.b...), nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	f.b = append(f.b[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "wtraw" }

const svcName = "wt.Test"

// Full method names of the test service.
const (
	mCall   = "/" + svcName + "/Call"
	mSlow   = "/" + svcName + "/Slow"
	mWatch  = "/" + svcName + "/Watch"  // server streaming
	mChat   = "/" + svcName + "/Chat"   // bidirectional
	mUpload = "/" + svcName + "/Upload" // client streaming
)

// service is the test service: its behaviour is set per test.
type service struct {
	unary  func(ctx context.Context, method string, in []byte) ([]byte, error)
	stream func(method string, ss grpc.ServerStream) error
	ran    atomic.Int64 // handler runs
}

func unaryMethod(name string) grpc.MethodDesc {
	full := "/" + svcName + "/" + name
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(frame)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				s := srv.(*service)
				s.ran.Add(1)
				out, err := s.unary(ctx, full, req.(*frame).b)
				if err != nil {
					return nil, err
				}
				return &frame{b: out}, nil
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
		},
	}
}

func streamMethod(name string, client, server bool) grpc.StreamDesc {
	full := "/" + svcName + "/" + name
	return grpc.StreamDesc{
		StreamName:    name,
		ClientStreams: client,
		ServerStreams: server,
		Handler: func(srv any, ss grpc.ServerStream) error {
			s := srv.(*service)
			s.ran.Add(1)
			return s.stream(full, ss)
		},
	}
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: svcName,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{unaryMethod("Call"), unaryMethod("Slow")},
	Streams: []grpc.StreamDesc{
		streamMethod("Watch", false, true),
		streamMethod("Chat", true, true),
		streamMethod("Upload", true, false),
	},
}

var (
	watchDesc  = &serviceDesc.Streams[0]
	chatDesc   = &serviceDesc.Streams[1]
	uploadDesc = &serviceDesc.Streams[2]
)

// env is a running test server and a client connection to it.
type env struct {
	svc  *service
	srv  *grpc.Server
	conn *grpc.ClientConn
}

// newEnv starts svc on bufconn (or loopback TCP if tcp), with the server
// options sopts, and dials it with dopts.
func newEnv(t testing.TB, tcp bool, svc *service, sopts []grpc.ServerOption, dopts []grpc.DialOption) *env {
	t.Helper()
	if svc.unary == nil {
		svc.unary = func(_ context.Context, _ string, in []byte) ([]byte, error) { return in, nil }
	}
	if svc.stream == nil {
		svc.stream = echoStream
	}
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.ForceServerCodec(rawCodec{})}, sopts...)...)
	srv.RegisterService(&serviceDesc, svc)
	var lis net.Listener
	target := "passthrough:///bufnet"
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})),
	}
	if tcp {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis = l
		target = l.Addr().String()
	} else {
		bl := bufconn.Listen(1 << 20)
		lis = bl
		base = append(base, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return bl.DialContext(ctx)
		}))
	}
	go srv.Serve(lis)
	conn, err := grpc.NewClient(target, append(base, dopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{svc: svc, srv: srv, conn: conn}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return e
}

// call makes a unary call of method with payload in.
func (e *env) call(ctx context.Context, method, in string, opts ...grpc.CallOption) (string, error) {
	out := new(frame)
	err := e.conn.Invoke(ctx, method, &frame{b: []byte(in)}, out, opts...)
	return string(out.b), err
}

// echoStream answers each message with itself, then ends OK when the
// client closes its side.
func echoStream(_ string, ss grpc.ServerStream) error {
	for {
		f := new(frame)
		if err := ss.RecvMsg(f); err != nil {
			return nil
		}
		if err := ss.SendMsg(f); err != nil {
			return err
		}
	}
}

func newBulkhead(t testing.TB, name string, limit, queue int) *bulkhead.Bulkhead {
	t.Helper()
	b, err := bulkhead.New(bulkhead.Config{Name: name, Limit: limit, MaxQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newRetry(t testing.TB, cfg retry.Config) *retry.Retry {
	t.Helper()
	if cfg.InitialInterval == 0 {
		cfg.InitialInterval = time.Millisecond
		cfg.MaxInterval = 10 * time.Millisecond
	}
	r, err := retry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newBreaker(t testing.TB, consecutive uint32) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(breaker.Config{Name: "dep", ConsecutiveFailures: consecutive, OpenTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newDeadline(t testing.TB, name string, d time.Duration) *deadline.Deadline {
	t.Helper()
	dl, err := deadline.New(deadline.Config{Name: name, Timeout: d})
	if err != nil {
		t.Fatal(err)
	}
	return dl
}

func newPipeline(t testing.TB, p compose.Policies) *compose.Pipeline {
	t.Helper()
	pl, err := compose.New("dep", p)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// waitFor polls cond until it holds (the tests' only wait for another
// goroutine's progress; no timing is asserted). It fails the test after
// 30 s: generous, as a loaded machine running -race can take seconds for
// what takes milliseconds when idle.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func pipelineOf(b *bulkhead.Bulkhead, r *retry.Retry) compose.Policies {
	return compose.Policies{Bulkhead: b, Retry: r}
}

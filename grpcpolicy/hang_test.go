package grpcpolicy_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/retry"
)

// A real server that sends one message and then hangs: the idle timeout
// ends the stream, frees the slot, and the server's handler sees its
// context end.
func TestStreamServerHangsMidStream(t *testing.T) {
	handlerDone := make(chan error, 1)
	svc := &service{stream: func(_ string, ss grpc.ServerStream) error {
		f := new(frame)
		if err := ss.RecvMsg(f); err != nil {
			return err
		}
		if err := ss.SendMsg(f); err != nil {
			return err
		}
		<-ss.Context().Done()
		handlerDone <- ss.Context().Err()
		return ss.Context().Err()
	}}
	bh := newBulkhead(t, "dep", 1, 0)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: bh, IdleTimeout: 50 * time.Millisecond})
	e := newEnv(t, true, svc, nil, c.DialOptions())
	cs, err := e.openWatch(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(cs)
	var te *grpcpolicy.StreamTimeoutError
	if len(got) != 1 || !errors.As(err, &te) || te.Kind != grpcpolicy.KindIdle || !errors.Is(err, deadline.ErrExceeded) {
		t.Fatalf("got %v, %v; want one message, then the idle timeout", got, err)
	}
	if bh.Active() != 0 {
		t.Error("slot held when RecvMsg returned")
	}
	if err := <-handlerDone; err == nil {
		t.Error("the server's handler context did not end")
	}
}

// A retry in the server's policy never runs a handler twice.
func TestServerRetryNeverRerunsHandler(t *testing.T) {
	pl := newPipeline(t, compose.Policies{Retry: newRetry(t, retry.Config{MaxAttempts: 5})})
	s := newServer(t, grpcpolicy.ServerConfig{Policy: pl})
	svc := &service{
		unary: failWith(100, codes.Internal, ""),
		stream: func(string, grpc.ServerStream) error {
			return status.Error(codes.Unavailable, "x")
		},
	}
	e := newEnv(t, false, svc, s.ServerOptions(), nil)
	if _, err := e.call(t.Context(), mCall, "x"); status.Code(err) != codes.Internal {
		t.Fatalf("unary: %v", err)
	}
	cs, err := e.openWatch(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recvAll(cs); status.Code(err) != codes.Unavailable {
		t.Fatalf("stream: %v", err)
	}
	if n := svc.ran.Load(); n != 2 {
		t.Errorf("handlers ran %d times, want 2 (once each)", n)
	}
}

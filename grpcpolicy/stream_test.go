package grpcpolicy_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// openWatch opens a server stream of method Watch with the request in.
func (e *env) openWatch(ctx context.Context, in string) (grpc.ClientStream, error) {
	cs, err := e.conn.NewStream(ctx, watchDesc, mWatch)
	if err != nil {
		return nil, err
	}
	if err := cs.SendMsg(&frame{b: []byte(in)}); err != nil {
		return cs, err
	}
	return cs, cs.CloseSend()
}

// recvAll reads cs to its end and returns the messages and the final error
// (nil for io.EOF).
func recvAll(cs grpc.ClientStream) ([]string, error) {
	var got []string
	for {
		f := new(frame)
		err := cs.RecvMsg(f)
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, string(f.b))
	}
}

// ending is one way for a stream to end.
type ending struct {
	name string
	// server runs in the handler after the first message was sent.
	server func(ctx context.Context, ss grpc.ServerStream) error
	// client ends the stream from the client's side; it returns the
	// error RecvMsg ended with.
	client  func(t *testing.T, cs grpc.ClientStream, cancel context.CancelFunc, e *env) error
	code    codes.Code
	failure bool // a breaker failure
}

// A stream holds its bulkhead slot until it ends, and frees it on every
// way of ending: EOF, the caller's cancellation, a server error, the
// server aborting (its connection gone), a status that is the caller's
// own, and the first message of a client-streaming call.
func TestStreamFreesSlotOnEveryEnding(t *testing.T) {
	drain := func(t *testing.T, cs grpc.ClientStream, _ context.CancelFunc, _ *env) error {
		_, err := recvAll(cs)
		return err
	}
	endings := []ending{
		{name: "eof", server: func(context.Context, grpc.ServerStream) error { return nil }, client: drain, code: codes.OK},
		{name: "server error", server: func(context.Context, grpc.ServerStream) error {
			return status.Error(codes.Internal, "boom")
		}, client: drain, code: codes.Internal, failure: true},
		{name: "caller's own status", server: func(context.Context, grpc.ServerStream) error {
			return status.Error(codes.NotFound, "gone")
		}, client: drain, code: codes.NotFound},
		{name: "caller cancels", server: func(ctx context.Context, _ grpc.ServerStream) error {
			<-ctx.Done()
			return ctx.Err()
		}, client: func(t *testing.T, cs grpc.ClientStream, cancel context.CancelFunc, _ *env) error {
			cancel()
			_, err := recvAll(cs)
			return err
		}, code: codes.Canceled},
		{name: "caller cancels without reading", server: func(ctx context.Context, _ grpc.ServerStream) error {
			<-ctx.Done()
			return ctx.Err()
		}, client: func(t *testing.T, cs grpc.ClientStream, cancel context.CancelFunc, _ *env) error {
			cancel()
			return status.Error(codes.Canceled, "not read")
		}, code: codes.Canceled},
		{name: "server aborts", server: func(ctx context.Context, _ grpc.ServerStream) error {
			<-ctx.Done()
			return ctx.Err()
		}, client: func(t *testing.T, cs grpc.ClientStream, _ context.CancelFunc, e *env) error {
			go e.srv.Stop()
			_, err := recvAll(cs)
			return err
		}, code: codes.Unavailable, failure: true},
	}
	for _, tc := range endings {
		for _, tcp := range []bool{false, true} {
			name := tc.name + "/bufconn"
			if tcp {
				name = tc.name + "/tcp"
			}
			t.Run(name, func(t *testing.T) { streamEnding(t, tcp, tc) })
		}
	}
}

func streamEnding(t *testing.T, tcp bool, tc ending) {
	svc := &service{stream: func(_ string, ss grpc.ServerStream) error {
		f := new(frame)
		if err := ss.RecvMsg(f); err != nil {
			return err
		}
		if err := ss.SendMsg(f); err != nil {
			return err
		}
		return tc.server(ss.Context(), ss)
	}}
	bh := newBulkhead(t, "dep", 1, 0)
	br := newBreaker(t, 1)
	pl := newPipeline(t, compose.Policies{Bulkhead: bh, Breaker: br})
	c := newClient(t, grpcpolicy.ClientConfig{Policy: pl})
	e := newEnv(t, tcp, svc, nil, c.DialOptions())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cs, err := e.openWatch(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	f := new(frame)
	if err := cs.RecvMsg(f); err != nil || string(f.b) != "m1" {
		t.Fatalf("first message %q, %v", f.b, err)
	}
	if bh.Active() != 1 {
		t.Fatalf("active = %d while the stream is open, want 1", bh.Active())
	}
	// A second stream is refused while the first holds the slot.
	if _, err := e.openWatch(t.Context(), "m2"); !errors.Is(err, bulkhead.ErrFull) || status.Code(err) != codes.Unavailable {
		t.Fatalf("second stream: %v, want bulkhead.ErrFull", err)
	}
	err = tc.client(t, cs, cancel, e)
	if status.Code(err) != tc.code {
		t.Errorf("stream ended with %v (code %v), want %v", err, status.Code(err), tc.code)
	}
	waitFor(t, "the slot to be freed", func() bool { return bh.Active() == 0 })
	if got := br.State() == breaker.Open; got != tc.failure {
		t.Errorf("breaker open = %v, want %v", got, tc.failure)
	}
}

// When RecvMsg returns the end of the stream, the slot is already free:
// no wait is needed.
func TestStreamSlotFreeWhenRecvReturns(t *testing.T) {
	bh := newBulkhead(t, "dep", 1, 0)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: bh})
	e := newEnv(t, false, &service{}, nil, c.DialOptions())
	for i := range 50 {
		cs, err := e.openWatch(t.Context(), "x")
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		got, err := recvAll(cs)
		if err != nil || len(got) != 1 {
			t.Fatalf("stream %d: %v, %v", i, got, err)
		}
		if bh.Active() != 0 {
			t.Fatalf("stream %d: slot still held after io.EOF", i)
		}
	}
}

// A stream that fails with UNAVAILABLE before any message reached the
// caller is retried: a new stream, with the request sent again. The
// caller sees one stream.
func TestStreamRetriedBeforeFirstMessage(t *testing.T) {
	var calls atomic.Int64
	var seen []string
	svc := &service{stream: func(_ string, ss grpc.ServerStream) error {
		f := new(frame)
		if err := ss.RecvMsg(f); err != nil {
			return err
		}
		seen = append(seen, string(f.b))
		if calls.Add(1) <= 2 {
			ss.SetTrailer(metadata.Pairs(grpcpolicy.PushbackKey, "1"))
			return status.Error(codes.Unavailable, "not now")
		}
		for _, m := range []string{"a", "b", "c"} {
			if err := ss.SendMsg(&frame{b: []byte(m)}); err != nil {
				return err
			}
		}
		return nil
	}}
	bh := newBulkhead(t, "dep", 1, 0)
	pl := newPipeline(t, compose.Policies{Bulkhead: bh, Retry: newRetry(t, retry.Config{MaxAttempts: 3})})
	c := newClient(t, grpcpolicy.ClientConfig{Policy: pl})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	cs, err := e.openWatch(t.Context(), "req")
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(cs)
	if err != nil || len(got) != 3 || got[0] != "a" || got[2] != "c" {
		t.Fatalf("got %v, %v; want [a b c]", got, err)
	}
	if len(seen) != 3 || seen[0] != "req" || seen[1] != "req" || seen[2] != "req" {
		t.Errorf("server saw requests %v, want the request three times", seen)
	}
	if bh.Active() != 0 {
		t.Errorf("slot held")
	}
}

// A bidirectional stream is replayed in full: every message sent, and the
// close of the sending side.
func TestStreamRetryReplaysSends(t *testing.T) {
	var calls atomic.Int64
	svc := &service{stream: func(_ string, ss grpc.ServerStream) error {
		var got []string
		for {
			f := new(frame)
			if err := ss.RecvMsg(f); err == io.EOF {
				break
			} else if err != nil {
				return err
			}
			got = append(got, string(f.b))
		}
		if calls.Add(1) == 1 {
			return status.Error(codes.Unavailable, "not now")
		}
		for _, m := range got {
			if err := ss.SendMsg(&frame{b: []byte(m)}); err != nil {
				return err
			}
		}
		return nil
	}}
	c := newClient(t, grpcpolicy.ClientConfig{Policy: newRetry(t, retry.Config{MaxAttempts: 2})})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	cs, err := e.conn.NewStream(t.Context(), chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"1", "2", "3"} {
		if err := cs.SendMsg(&frame{b: []byte(m)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(cs)
	if err != nil || len(got) != 3 || got[0] != "1" || got[2] != "3" {
		t.Fatalf("got %v, %v", got, err)
	}
	if calls.Load() != 2 {
		t.Errorf("server ran %d times", calls.Load())
	}
}

// Once a message has reached the caller, nothing is retried.
func TestStreamNotRetriedAfterMessage(t *testing.T) {
	svc := &service{stream: func(_ string, ss grpc.ServerStream) error {
		f := new(frame)
		if err := ss.RecvMsg(f); err != nil {
			return err
		}
		if err := ss.SendMsg(f); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "gone mid-stream")
	}}
	c := newClient(t, grpcpolicy.ClientConfig{Policy: newRetry(t, retry.Config{MaxAttempts: 3})})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	cs, err := e.openWatch(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(cs)
	if len(got) != 1 || status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, %v; want one message then UNAVAILABLE", got, err)
	}
	if errors.Is(err, retry.ErrExhausted) {
		t.Errorf("err %v: a committed stream must end at once, not exhausted", err)
	}
	if n := svc.ran.Load(); n != 1 {
		t.Errorf("server ran %d times, want 1", n)
	}
}

// A header received commits the stream too.
func TestStreamNotRetriedAfterHeader(t *testing.T) {
	svc := &service{stream: func(_ string, ss grpc.ServerStream) error {
		f := new(frame)
		if err := ss.RecvMsg(f); err != nil {
			return err
		}
		if err := ss.SendHeader(metadata.Pairs("h", "1")); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "after the header")
	}}
	c := newClient(t, grpcpolicy.ClientConfig{Policy: newRetry(t, retry.Config{MaxAttempts: 3})})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	cs, err := e.openWatch(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	md, err := cs.Header()
	if err != nil || len(md.Get("h")) != 1 {
		t.Fatalf("header %v, %v", md, err)
	}
	if _, err := recvAll(cs); status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v", err)
	}
	if n := svc.ran.Load(); n != 1 {
		t.Errorf("server ran %d times, want 1", n)
	}
}

// A client-streaming call ends with its one response: the slot is free
// when RecvMsg returns it.
func TestStreamClientStreamingEndsWithResponse(t *testing.T) {
	svc := &service{stream: func(_ string, ss grpc.ServerStream) error {
		n := 0
		for {
			if err := ss.RecvMsg(new(frame)); err == io.EOF {
				break
			} else if err != nil {
				return err
			}
			n++
		}
		return ss.SendMsg(&frame{b: []byte{byte('0' + n)}})
	}}
	bh := newBulkhead(t, "dep", 1, 0)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: bh})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	for range 3 {
		cs, err := e.conn.NewStream(t.Context(), uploadDesc, mUpload)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := cs.SendMsg(&frame{b: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		f := new(frame)
		if err := cs.RecvMsg(f); err != nil || string(f.b) != "3" {
			t.Fatalf("response %q, %v", f.b, err)
		}
		if bh.Active() != 0 {
			t.Fatal("slot held after the response of a client-streaming call")
		}
	}
}

// A stream refused by an open breaker never reaches the server.
func TestStreamRejected(t *testing.T) {
	br := newBreaker(t, 1)
	br.ForceOpen()
	c := newClient(t, grpcpolicy.ClientConfig{Policy: br})
	e := newEnv(t, false, &service{}, nil, c.DialOptions())
	_, err := e.openWatch(t.Context(), "x")
	if !errors.Is(err, policy.ErrRejected) || status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v", err)
	}
	if e.svc.ran.Load() != 0 {
		t.Error("the server ran")
	}
}

// A stream whose opening fails with the caller's own status gets that
// status unchanged, and the policy sees a success.
func TestStreamOpenCallerError(t *testing.T) {
	br := newBreaker(t, 1)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: br})
	notFound := status.Error(codes.NotFound, "no such stream")
	open := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		return nil, notFound
	}
	for range 3 {
		if _, err := c.StreamInterceptor()(t.Context(), watchDesc, nil, mWatch, open); err != notFound {
			t.Fatalf("err = %v, want grpc-go's own error", err)
		}
	}
	if br.State() != 0 {
		t.Errorf("breaker %v after the caller's own errors", br.State())
	}
}

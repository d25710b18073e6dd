package grpcpolicy_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// panicAfter is a user-written policy that runs fn under inner, then
// panics if fn ran (a buggy hook, say).
type panicAfter struct{ inner policy.Policy }

func (p panicAfter) Execute(ctx context.Context, fn policy.Func) error {
	p.inner.Execute(ctx, fn)
	panic("policy bug after the call")
}

// A panic under the policy before the stream reaches the caller is raised
// on the caller's goroutine, and the slot is freed.
func TestStreamPanicBeforeHandover(t *testing.T) {
	bh := newBulkhead(t, "dep", 1, 0)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: bh})
	boom := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		panic("streamer bug")
	}
	func() {
		defer func() {
			if v := recover(); v != "streamer bug" {
				t.Errorf("recovered %v, want the streamer's panic", v)
			}
		}()
		c.StreamInterceptor()(t.Context(), watchDesc, nil, mWatch, boom)
		t.Error("no panic")
	}()
	if bh.Active() != 0 {
		t.Error("slot held after a panic")
	}
}

// A panic in a policy after the stream reached the caller cannot be raised
// anywhere useful: the stream ends with an error, and the slot is free.
func TestStreamPanicAfterHandover(t *testing.T) {
	bh := newBulkhead(t, "dep", 1, 0)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: panicAfter{bh}})
	e := newEnv(t, false, &service{}, nil, c.DialOptions())
	cs, err := e.openWatch(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(frame)); err != nil {
		t.Fatal(err)
	}
	err = cs.RecvMsg(new(frame))
	if err == io.EOF || status.Code(err) != codes.Unknown {
		t.Fatalf("err = %v, want the policy's panic as an UNKNOWN error", err)
	}
	if bh.Active() != 0 {
		t.Error("slot held")
	}
}

// A unary call's panic under the policy goes up to the caller, and the
// slot is freed.
func TestUnaryPanicFreesSlot(t *testing.T) {
	bh := newBulkhead(t, "dep", 1, 0)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: bh})
	boom := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		panic("invoker bug")
	}
	for range 3 {
		func() {
			defer func() {
				if v := recover(); v != "invoker bug" {
					t.Errorf("recovered %v", v)
				}
			}()
			c.UnaryInterceptor()(t.Context(), mCall, nil, nil, nil, boom)
		}()
	}
	if bh.Active() != 0 {
		t.Error("slot held")
	}
}

// A stream whose caller sent more than MaxReplay messages before receiving
// anything is no longer retried: they could not all be sent again.
func TestStreamReplayLimit(t *testing.T) {
	for _, n := range []int{grpcpolicy.MaxReplay, grpcpolicy.MaxReplay + 1} {
		var calls atomic.Int64
		svc := &service{stream: func(_ string, ss grpc.ServerStream) error {
			got := 0
			for {
				if err := ss.RecvMsg(new(frame)); err == io.EOF {
					break
				} else if err != nil {
					return err
				}
				got++
			}
			if calls.Add(1) == 1 {
				return status.Error(codes.Unavailable, "not now")
			}
			return ss.SendMsg(&frame{b: []byte{byte(got)}})
		}}
		c := newClient(t, grpcpolicy.ClientConfig{Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, retry.Config{MaxAttempts: 2})})})
		e := newEnv(t, false, svc, nil, c.DialOptions())
		cs, err := e.conn.NewStream(t.Context(), chatDesc, mChat)
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			if err := cs.SendMsg(&frame{b: []byte("m")}); err != nil {
				t.Fatal(err)
			}
		}
		cs.CloseSend()
		got, err := recvAll(cs)
		if n <= grpcpolicy.MaxReplay {
			if err != nil || len(got) != 1 || got[0][0] != byte(n) {
				t.Errorf("%d messages: got %q, %v; want a retried stream that saw all %d", n, got, err, n)
			}
		} else if status.Code(err) != codes.Unavailable || calls.Load() != 1 {
			t.Errorf("%d messages: %v after %d runs; want UNAVAILABLE, not retried", n, err, calls.Load())
		}
	}
}

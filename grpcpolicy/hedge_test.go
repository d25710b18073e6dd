package grpcpolicy_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/policy"
)

// twice runs fn, and 1 ms later runs it again beside the first, as a
// hedge would; it returns the first outcome and cancels the attempts, as
// a hedge cancels its losers, without waiting for them.
type twice struct{}

func (twice) Execute(ctx context.Context, fn policy.Func) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- fn(ctx) }()
	select {
	case err := <-errs:
		return err
	case <-time.After(time.Millisecond):
	}
	go func() { errs <- fn(ctx) }()
	return <-errs
}

// A policy that runs attempts concurrently is refused loudly, not raced:
// the second attempt fails at once with an error that says why, and the
// call returns only once the first attempt has, so nothing writes the
// caller's reply afterwards (-race checks it).
func TestClientRefusesConcurrentAttempts(t *testing.T) {
	c := newClient(t, grpcpolicy.ClientConfig{Policy: twice{}})
	entered := make(chan struct{}, 8)
	svc := &service{unary: func(ctx context.Context, _ string, in []byte) ([]byte, error) {
		entered <- struct{}{}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond): // long after the 1 ms hedge delay, even on a loaded machine
		}
		return in, nil
	}}
	e := newEnv(t, false, svc, nil, c.DialOptions())
	for range 3 {
		reply := new(frame)
		err := e.conn.Invoke(t.Context(), mCall, &frame{b: []byte("x")}, reply)
		if err == nil || !strings.Contains(err.Error(), "two attempts of a call at once") {
			t.Fatalf("err = %v, want the hedge refused", err)
		}
		reply.b = nil // written by nobody once Invoke has returned
	}

	// Streams too.
	s := &fakeStreamer{feeds: feeds(2)}
	cs, err := c.StreamInterceptor()(t.Context(), watchDesc, nil, mWatch, s.streamer)
	if err == nil {
		_, err = recvAll(cs)
	}
	if err == nil || !strings.Contains(err.Error(), "two attempts of a call at once") {
		t.Fatalf("stream: %v", err)
	}
}

// A policy that runs attempts concurrently, given to the server
// interceptor, runs the handler once, and the interceptor returns only
// once that handler has: its second attempt is refused without stopping
// the first.
func TestServerHedgeWaitsForTheHandler(t *testing.T) {
	s := newServer(t, grpcpolicy.ServerConfig{Policy: twice{}})
	var running, ran atomic.Int32
	svc := &service{unary: func(ctx context.Context, _ string, in []byte) ([]byte, error) {
		running.Add(1)
		defer running.Add(-1)
		ran.Add(1)
		time.Sleep(50 * time.Millisecond)
		return in, nil
	}}
	e := newEnv(t, false, svc, s.ServerOptions(), nil)
	for range 3 {
		e.call(t.Context(), mCall, "x")
		if n := running.Load(); n != 0 {
			t.Fatalf("the call returned with %d handlers still running", n)
		}
	}
	if n := ran.Load(); n != 3 {
		t.Errorf("handler ran %d times for 3 calls; want 3", n)
	}
}

// An attempt a policy starts after Execute has returned runs no handler:
// serverrun_test.go's TestServerAttemptAfterReturnRunsNoHandler, whose
// attempt calls fn only once the interceptor has returned. (A test here
// started fn on a goroutine at once, which may run before the interceptor
// closes the call: the handler then ran, rightly, while the interceptor
// waited for it, and the test failed 2 runs in 300.)

// fakeServerStream is a grpc.ServerStream with a context and nothing else.
type fakeServerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f *fakeServerStream) Context() context.Context { return f.ctx }
func (f *fakeServerStream) SetTrailer(metadata.MD)   {}

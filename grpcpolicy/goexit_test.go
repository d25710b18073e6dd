package grpcpolicy_test

import (
	"context"
	"io"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/policy"
)

// onGoroutine runs f on a goroutine of its own and reports how it ended:
// by runtime.Goexit, or by a panic (its value), or normally (neither).
func onGoroutine(f func()) (goexit bool, panicked any) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		normal := false
		defer func() {
			panicked = recover()
			goexit = !normal && panicked == nil
		}()
		f()
		normal = true
	}()
	<-done
	return goexit, panicked
}

// goexitAfter is a user-written policy that runs fn under inner, then
// calls runtime.Goexit (a hook that calls t.FailNow, say).
type goexitAfter struct{ inner policy.Policy }

func (p goexitAfter) Execute(ctx context.Context, fn policy.Func) error {
	p.inner.Execute(ctx, fn)
	runtime.Goexit()
	return nil
}

// A runtime.Goexit under the policy before the stream reaches the caller
// ends the caller's goroutine by Goexit too, as it would have without the
// interceptor, not by a "panic: <nil>" (it did: a PanicNilError); the
// slot is freed.
func TestStreamGoexitBeforeHandover(t *testing.T) {
	bh := newBulkhead(t, "dep", 1, 0)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: bh})
	exit := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		runtime.Goexit()
		return nil, nil
	}
	for range 2 {
		goexit, v := onGoroutine(func() {
			c.StreamInterceptor()(t.Context(), watchDesc, nil, mWatch, exit)
		})
		if !goexit || v != nil {
			t.Fatalf("goexit %v, panic %v; want the caller's goroutine ended by Goexit", goexit, v)
		}
		if bh.Active() != 0 {
			t.Fatal("slot held after a Goexit")
		}
	}
}

// A runtime.Goexit in a policy after the stream reached the caller ends
// the stream with an error that says Goexit, not "panic ... <nil>"; the
// slot is free.
func TestStreamGoexitAfterHandover(t *testing.T) {
	bh := newBulkhead(t, "dep", 1, 0)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: goexitAfter{bh}})
	e := newEnv(t, false, &service{}, nil, c.DialOptions())
	cs, err := e.openWatch(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(frame)); err != nil {
		t.Fatal(err)
	}
	err = cs.RecvMsg(new(frame))
	if err == io.EOF || status.Code(err) != codes.Unknown ||
		!strings.Contains(err.Error(), "runtime.Goexit") || strings.Contains(err.Error(), "panic") {
		t.Fatalf("err = %v, want an UNKNOWN error naming runtime.Goexit", err)
	}
	if bh.Active() != 0 {
		t.Error("slot held")
	}
}

// A unary call's Goexit under the policy ends the caller's goroutine by
// Goexit; the slot is freed, and the interceptor's recycled calls still
// work afterwards.
func TestUnaryGoexit(t *testing.T) {
	bh := newBulkhead(t, "dep", 1, 0)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: bh})
	exit := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		runtime.Goexit()
		return nil
	}
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	for range 3 {
		goexit, v := onGoroutine(func() { c.UnaryInterceptor()(t.Context(), mCall, nil, nil, nil, exit) })
		if !goexit || v != nil {
			t.Fatalf("goexit %v, panic %v; want Goexit", goexit, v)
		}
		if bh.Active() != 0 {
			t.Fatal("slot held after a Goexit")
		}
		if err := c.UnaryInterceptor()(t.Context(), mCall, nil, nil, nil, ok); err != nil {
			t.Fatal(err)
		}
	}
}

// A server handler's Goexit goes on up (grpc-go's goroutine ends, as it
// would without the interceptor), reported as nothing else, and frees the
// policy's slot; unary and stream.
func TestServerGoexit(t *testing.T) {
	bh := newBulkhead(t, "dep", 1, 0)
	s := newServer(t, grpcpolicy.ServerConfig{Policy: bh})
	unary := func(context.Context, any) (any, error) { runtime.Goexit(); return nil, nil }
	stream := func(any, grpc.ServerStream) error { runtime.Goexit(); return nil }
	for range 2 {
		goexit, v := onGoroutine(func() {
			s.UnaryInterceptor()(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: mCall}, unary)
		})
		if !goexit || v != nil || bh.Active() != 0 {
			t.Fatalf("unary: goexit %v, panic %v, active %d; want Goexit and the slot free", goexit, v, bh.Active())
		}
		goexit, v = onGoroutine(func() {
			s.StreamInterceptor()(nil, &fakeServerStream{ctx: t.Context()}, &grpc.StreamServerInfo{FullMethod: mWatch}, stream)
		})
		if !goexit || v != nil || bh.Active() != 0 {
			t.Fatalf("stream: goexit %v, panic %v, active %d; want Goexit and the slot free", goexit, v, bh.Active())
		}
	}
}

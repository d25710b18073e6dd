package grpcpolicy_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

func newServer(t testing.TB, cfg grpcpolicy.ServerConfig) *grpcpolicy.Server {
	t.Helper()
	s, err := grpcpolicy.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewServerConfigErrors(t *testing.T) {
	bh := newBulkhead(t, "x", 1, 0)
	for _, tc := range []struct {
		cfg  grpcpolicy.ServerConfig
		want string
	}{
		{grpcpolicy.ServerConfig{}, "ServerConfig.Policy"},
		{grpcpolicy.ServerConfig{Policy: bh, RejectCode: codes.Internal}, "ServerConfig.RejectCode"},
		{grpcpolicy.ServerConfig{Methods: map[string]policy.Policy{"nope": bh}}, "ServerConfig.Methods key"},
	} {
		_, err := grpcpolicy.NewServer(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "grpcpolicy: ") {
			t.Errorf("NewServer(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

// blockSlow makes mSlow wait for release (or its context) after telling
// entered; other methods echo.
func blockSlow(entered chan<- struct{}, release <-chan struct{}) func(context.Context, string, []byte) ([]byte, error) {
	return func(ctx context.Context, m string, in []byte) ([]byte, error) {
		if m == mSlow {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		return in, nil
	}
}

// A rejected call is answered at once with the reject code and the
// pushback trailer, and costs the server no handler run; a slow method
// sheds only its own load.
func TestServerShedsLoad(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     codes.Code
		pushback time.Duration
		wantCode codes.Code
		wantPB   string
	}{
		{"default", 0, 0, codes.Unavailable, "1000"},
		{"resource exhausted", codes.ResourceExhausted, 1500 * time.Microsecond, codes.ResourceExhausted, "2"},
		{"no retry", codes.Unavailable, -1, codes.Unavailable, "-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entered := make(chan struct{}, 1)
			release := make(chan struct{})
			slow := newBulkhead(t, "slow", 1, 0)
			s := newServer(t, grpcpolicy.ServerConfig{
				Methods:    map[string]policy.Policy{mSlow: slow},
				Policy:     newBulkhead(t, "rest", 4, 0),
				RejectCode: tc.code,
				Pushback:   tc.pushback,
			})
			svc := &service{unary: blockSlow(entered, release)}
			e := newEnv(t, true, svc, s.ServerOptions(), nil)
			done := make(chan error, 1)
			go func() {
				_, err := e.call(context.Background(), mSlow, "x")
				done <- err
			}()
			<-entered
			var trailer metadata.MD
			_, err := e.call(t.Context(), mSlow, "y", grpc.Trailer(&trailer))
			if status.Code(err) != tc.wantCode {
				t.Errorf("rejected call: %v, want %v", err, tc.wantCode)
			}
			if got := trailer.Get(grpcpolicy.PushbackKey); len(got) != 1 || got[0] != tc.wantPB {
				t.Errorf("pushback trailer %v, want %s", got, tc.wantPB)
			}
			if strings.Contains(status.Convert(err).Message(), "slow") {
				t.Errorf("the rejection's message names the policy: %v", err)
			}
			if n := svc.ran.Load(); n != 1 {
				t.Errorf("handler ran %d times, want 1: a rejected call must not run it", n)
			}
			if out, err := e.call(t.Context(), mCall, "fast"); err != nil || out != "fast" {
				t.Errorf("another method: %q, %v", out, err)
			}
			close(release)
			if err := <-done; err != nil {
				t.Errorf("slow call: %v", err)
			}
			if slow.Active() != 0 {
				t.Error("slot held")
			}
		})
	}
}

// A handler's failure status is a failure for the server's breaker; the
// caller's own status is not.
func TestServerHandlerFailureCounts(t *testing.T) {
	br := newBreaker(t, 3)
	s := newServer(t, grpcpolicy.ServerConfig{Policy: br})
	var mu sync.Mutex
	code := codes.NotFound
	svc := &service{unary: func(context.Context, string, []byte) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		return nil, status.Error(code, "x")
	}}
	e := newEnv(t, false, svc, s.ServerOptions(), nil)
	for range 5 {
		if _, err := e.call(t.Context(), mCall, "x"); status.Code(err) != codes.NotFound {
			t.Fatalf("err %v", err)
		}
	}
	if br.State() != breaker.Closed {
		t.Fatalf("breaker %v after NOT_FOUND", br.State())
	}
	mu.Lock()
	code = codes.Internal
	mu.Unlock()
	for range 3 {
		if _, err := e.call(t.Context(), mCall, "x"); status.Code(err) != codes.Internal {
			t.Fatalf("err %v: the handler's status must reach the client unchanged", err)
		}
	}
	if br.State() != breaker.Open {
		t.Fatalf("breaker %v after 3 INTERNAL", br.State())
	}
	ran := svc.ran.Load()
	var trailer metadata.MD
	_, err := e.call(t.Context(), mCall, "x", grpc.Trailer(&trailer))
	if status.Code(err) != codes.Unavailable || len(trailer.Get(grpcpolicy.PushbackKey)) != 1 {
		t.Fatalf("err %v, trailer %v: want a shed call", err, trailer)
	}
	if svc.ran.Load() != ran {
		t.Error("the handler ran behind an open breaker")
	}
}

// A server Deadline bounds the handler: the client gets DEADLINE_EXCEEDED.
func TestServerDeadline(t *testing.T) {
	s := newServer(t, grpcpolicy.ServerConfig{Policy: newDeadline(t, "srv", 20*time.Millisecond)})
	svc := &service{unary: func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err() // a plain error, no status
	}}
	e := newEnv(t, false, svc, s.ServerOptions(), nil)
	if _, err := e.call(t.Context(), mCall, "x"); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err %v, want DEADLINE_EXCEEDED", err)
	}
}

// A queued call whose client gives up leaves the queue without running.
func TestServerCanceledInQueue(t *testing.T) {
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	bh := newBulkhead(t, "srv", 1, 1)
	s := newServer(t, grpcpolicy.ServerConfig{Policy: bh})
	svc := &service{unary: blockSlow(entered, release)}
	e := newEnv(t, false, svc, s.ServerOptions(), nil)
	done := make(chan error, 1)
	go func() {
		_, err := e.call(context.Background(), mSlow, "x")
		done <- err
	}()
	<-entered
	ctx, cancel := context.WithCancel(t.Context())
	queued := make(chan error, 1)
	go func() {
		_, err := e.call(ctx, mSlow, "y")
		queued <- err
	}()
	waitFor(t, "the call to queue", func() bool { return bh.Queued() == 1 })
	cancel()
	if err := <-queued; status.Code(err) != codes.Canceled {
		t.Errorf("queued call: %v", err)
	}
	waitFor(t, "the queue to empty", func() bool { return bh.Queued() == 0 })
	close(release)
	if err := <-done; err != nil {
		t.Error(err)
	}
	if svc.ran.Load() != 1 {
		t.Errorf("handler ran %d times", svc.ran.Load())
	}
}

// A streaming handler holds its slot until it returns, and a rejected
// stream never runs it.
func TestServerStream(t *testing.T) {
	bh := newBulkhead(t, "srv", 1, 0)
	s := newServer(t, grpcpolicy.ServerConfig{Policy: bh, Pushback: 250 * time.Millisecond})
	svc := &service{}
	e := newEnv(t, false, svc, s.ServerOptions(), nil)
	cs, err := e.conn.NewStream(t.Context(), chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&frame{b: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(frame)); err != nil {
		t.Fatal(err)
	}
	cs2, err := e.conn.NewStream(t.Context(), chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	err = cs2.RecvMsg(new(frame))
	if status.Code(err) != codes.Unavailable || cs2.Trailer().Get(grpcpolicy.PushbackKey)[0] != "250" {
		t.Fatalf("second stream: %v, trailer %v", err, cs2.Trailer())
	}
	if svc.ran.Load() != 1 {
		t.Fatalf("handler ran %d times", svc.ran.Load())
	}
	cs.CloseSend()
	if _, err := recvAll(cs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the slot", func() bool { return bh.Active() == 0 })
}

// A panic in a handler frees the slot; grpc-go does not recover it, so a
// recovery interceptor sits outside.
func TestServerHandlerPanicFreesSlot(t *testing.T) {
	bh := newBulkhead(t, "srv", 1, 0)
	s := newServer(t, grpcpolicy.ServerConfig{Policy: bh})
	recoverer := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if v := recover(); v != nil {
				err = status.Errorf(codes.Internal, "panic: %v", v)
			}
		}()
		return h(ctx, req)
	}
	svc := &service{unary: func(context.Context, string, []byte) ([]byte, error) { panic("handler bug") }}
	e := newEnv(t, false, svc, []grpc.ServerOption{grpc.ChainUnaryInterceptor(recoverer, s.UnaryInterceptor())}, nil)
	for range 3 {
		if _, err := e.call(t.Context(), mCall, "x"); status.Code(err) != codes.Internal {
			t.Fatalf("err %v: want the recovered panic, not a rejection", err)
		}
	}
	if bh.Active() != 0 {
		t.Error("slot held after a panic")
	}
}

// End to end: a client behind grpcpolicy meets a server that sheds load
// with a pushback, and waits exactly the pushback before its next attempt.
func TestClientHonoursServerPushback(t *testing.T) {
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	s := newServer(t, grpcpolicy.ServerConfig{Methods: map[string]policy.Policy{mSlow: newBulkhead(t, "slow", 1, 0)}, Pushback: 5 * time.Millisecond})
	var mu sync.Mutex
	var waits []time.Duration
	var errs []error
	rt := newRetry(t, retry.Config{MaxAttempts: 50, MaxInterval: time.Second, OnRetry: func(_ context.Context, _ int, err error, w time.Duration) {
		mu.Lock()
		waits = append(waits, w)
		errs = append(errs, err)
		n := len(waits)
		mu.Unlock()
		if n == 3 {
			close(release)
		}
	}})
	c := newClient(t, grpcpolicy.ClientConfig{Methods: map[string]policy.Policy{mSlow: rt}})
	svc := &service{unary: blockSlow(entered, release)}
	e := newEnv(t, true, svc, s.ServerOptions(), c.DialOptions())
	first := make(chan error, 1)
	go func() {
		err := e.conn.Invoke(context.Background(), mSlow, &frame{}, new(frame), grpc.WaitForReady(true))
		first <- err
	}()
	<-entered
	go func() { <-entered }() // the retried call's own entry
	if _, err := e.call(t.Context(), mSlow, "y"); err != nil {
		t.Fatalf("retried call: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, w := range waits {
		var se *grpcpolicy.StatusError
		if w != 5*time.Millisecond || !errors.As(errs[i], &se) || se.Code != codes.Unavailable {
			t.Errorf("retry %d: wait %v after %v; want 5ms after a shed UNAVAILABLE", i, w, errs[i])
		}
	}
	if len(waits) < 3 {
		t.Errorf("%d retries", len(waits))
	}
}

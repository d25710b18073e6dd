package grpcpolicy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/retry"
)

// TestUnaryCallersDeadlineNotCounted checks that a call that ends at the
// caller's own deadline is not a breaker failure: a breaker that trips on
// the first failure stays closed after three of them.
func TestUnaryCallersDeadlineNotCounted(t *testing.T) {
	svc := &service{unary: func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	br := newBreaker(t, 1)
	pl := newPipeline(t, compose.Policies{Retry: newRetry(t, retry.Config{MaxAttempts: 3}), Breaker: br})
	c := newClient(t, grpcpolicy.ClientConfig{Policy: pl})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		_, err := e.call(ctx, mCall, "x")
		cancel()
		if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v (code %v), want DEADLINE_EXCEEDED", err, status.Code(err))
		}
	}
	if s, n := br.State(), br.Counts(); s != breaker.Closed || n.TotalFailures != 0 {
		t.Errorf("breaker %v, counts %+v after three calls ended by the caller's deadline", s, n)
	}
}

// TestUnaryAttemptDeadlineCounted checks the other side: our own attempt
// deadline is a breaker failure.
func TestUnaryAttemptDeadlineCounted(t *testing.T) {
	svc := &service{unary: func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	br := newBreaker(t, 1)
	pl := newPipeline(t, compose.Policies{Breaker: br, Attempt: newDeadline(t, "attempt", 20*time.Millisecond)})
	c := newClient(t, grpcpolicy.ClientConfig{Policy: pl})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	if _, err := e.call(t.Context(), mCall, "x"); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err = %v (code %v), want DEADLINE_EXCEEDED", err, status.Code(err))
	}
	if s := br.State(); s != breaker.Open {
		t.Errorf("breaker %v after an attempt timeout, want open", s)
	}
}

// TestStreamCallersDeadlineNotCounted checks a stream the caller's own
// deadline ends: not a breaker failure.
func TestStreamCallersDeadlineNotCounted(t *testing.T) {
	svc := &service{stream: func(_ string, ss grpc.ServerStream) error {
		<-ss.Context().Done()
		return ss.Context().Err()
	}}
	br := newBreaker(t, 1)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: newPipeline(t, compose.Policies{Breaker: br})})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		s, err := e.conn.NewStream(ctx, watchDesc, mWatch)
		if err == nil {
			err = s.SendMsg(&frame{b: []byte("x")})
		}
		if err == nil {
			err = s.CloseSend()
		}
		if err == nil {
			err = s.RecvMsg(new(frame))
		}
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("err = %v (code %v), want DEADLINE_EXCEEDED", err, status.Code(err))
		}
	}
	if s, n := br.State(), br.Counts(); s != breaker.Closed || n.TotalFailures != 0 {
		t.Errorf("breaker %v, counts %+v after three streams ended by the caller's deadline", s, n)
	}
}

package grpcpolicy_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/retry"
)

// errInjected marks a panic the storm injects on purpose.
var errInjected = errors.New("injected panic")

// A storm of unary calls and streams, both sides guarded, with random
// server failures, pushbacks, handler panics, client-side panics under the
// policy, and callers that cancel at random moments or abandon their
// streams by cancelling: afterwards every slot on both sides is free and
// no goroutine is left (goleak, in TestMain).
func TestStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("storm: not in -short")
	}
	stormRun(t, 16, 40)
}

// TestStormShort is the storm at a size for every run.
func TestStormShort(t *testing.T) { stormRun(t, 8, 10) }

func stormRun(t *testing.T, workers, ops int) {
	srvBH := newBulkhead(t, "srv", 4, 4)
	srv := newServer(t, grpcpolicy.ServerConfig{Policy: srvBH, Pushback: time.Millisecond})
	recoverer := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if v := recover(); v != nil {
				err = status.Errorf(codes.Internal, "panic: %v", v)
			}
		}()
		return h(ctx, req)
	}
	streamRecoverer := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = status.Errorf(codes.Internal, "panic: %v", v)
			}
		}()
		return h(srv, ss)
	}
	fate := func() int { return rand.IntN(10) }
	svc := &service{
		unary: func(ctx context.Context, _ string, in []byte) ([]byte, error) {
			switch fate() {
			case 0:
				grpc.SetTrailer(ctx, metadata.Pairs(grpcpolicy.PushbackKey, "1"))
				return nil, status.Error(codes.Unavailable, "busy")
			case 1:
				return nil, status.Error(codes.Internal, "bug")
			case 2:
				return nil, status.Error(codes.NotFound, "no")
			case 3:
				panic(errInjected)
			case 4:
				select {
				case <-time.After(time.Duration(rand.IntN(3)) * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return in, nil
		},
		stream: func(_ string, ss grpc.ServerStream) error {
			if err := ss.RecvMsg(new(frame)); err != nil {
				return err
			}
			n := rand.IntN(4)
			for i := range n {
				if fate() == 0 {
					return status.Error(codes.Unavailable, "gone")
				}
				if i == 2 && fate() < 2 {
					panic(errInjected)
				}
				if err := ss.SendMsg(&frame{b: []byte("m")}); err != nil {
					return err
				}
			}
			if fate() == 0 {
				<-ss.Context().Done() // hang until the client gives up
				return ss.Context().Err()
			}
			return nil
		},
	}
	cliBH := newBulkhead(t, "cli", 6, 6)
	pl := newPipeline(t, compose.Policies{
		Bulkhead: cliBH,
		Retry:    newRetry(t, retry.Config{MaxAttempts: 3}),
		Breaker:  newBreaker(t, 1000),
		Attempt:  newDeadline(t, "attempt", time.Second),
	})
	c := newClient(t, grpcpolicy.ClientConfig{Policy: pl, FirstMessageTimeout: time.Second, IdleTimeout: time.Second})
	// User code under the policy that panics now and then.
	panicky := func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if rand.IntN(40) == 0 {
			panic(errInjected)
		}
		return inv(ctx, m, req, reply, cc, opts...)
	}
	panickyStream := func(ctx context.Context, d *grpc.StreamDesc, cc *grpc.ClientConn, m string, s grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if rand.IntN(40) == 0 {
			panic(errInjected)
		}
		return s(ctx, d, cc, m, opts...)
	}
	dopts := []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(c.UnaryInterceptor(), panicky),
		grpc.WithChainStreamInterceptor(c.StreamInterceptor(), panickyStream),
		grpc.WithDisableRetry(),
	}
	sopts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(recoverer, srv.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(streamRecoverer, srv.StreamInterceptor()),
	}
	e := newEnv(t, false, svc, sopts, dopts)

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range ops {
				stormOp(t, e)
			}
		})
	}
	wg.Wait()
	waitFor(t, "every slot to be free", func() bool {
		return cliBH.Active() == 0 && cliBH.Queued() == 0 && srvBH.Active() == 0 && srvBH.Queued() == 0
	})
}

// stormOp makes one call or stream, with a random cancellation, and checks
// that whatever ends it has a status.
func stormOp(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if rand.IntN(4) == 0 {
		time.AfterFunc(time.Duration(rand.IntN(2000))*time.Microsecond, cancel)
	}
	defer func() {
		if v := recover(); v != nil && v != errInjected {
			panic(v)
		}
	}()
	if rand.IntN(2) == 0 {
		_, err := e.call(ctx, mCall, "x")
		checkStormErr(t, err)
		return
	}
	cs, err := e.openWatch(ctx, "x")
	if err != nil {
		checkStormErr(t, err)
		return
	}
	if rand.IntN(5) == 0 {
		return // abandoned: the deferred cancel ends it
	}
	_, err = recvAll(cs)
	checkStormErr(t, err)
}

func checkStormErr(t *testing.T, err error) {
	if err == nil {
		return
	}
	if _, ok := status.FromError(err); !ok {
		t.Errorf("error without a status: %v", err)
	}
	if errors.Is(err, bulkhead.ErrFull) && status.Code(err) != codes.Unavailable {
		t.Errorf("rejection with code %v", status.Code(err))
	}
}

package grpcpolicy_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

func newClient(t testing.TB, cfg grpcpolicy.ClientConfig) *grpcpolicy.Client {
	t.Helper()
	c, err := grpcpolicy.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// failWith returns a server behaviour that fails the first n calls with
// code, with the pushback trailer pb if not empty, then echoes.
func failWith(n int64, code codes.Code, pb string) func(context.Context, string, []byte) ([]byte, error) {
	var calls atomic.Int64
	return func(ctx context.Context, _ string, in []byte) ([]byte, error) {
		if calls.Add(1) <= n {
			if pb != "" {
				grpc.SetTrailer(ctx, metadata.Pairs(grpcpolicy.PushbackKey, pb))
			}
			return nil, status.Error(code, "injected")
		}
		return in, nil
	}
}

func TestNewClientConfigErrors(t *testing.T) {
	bh := newBulkhead(t, "x", 1, 0)
	for _, tc := range []struct {
		cfg  grpcpolicy.ClientConfig
		want string
	}{
		{grpcpolicy.ClientConfig{}, "ClientConfig.Policy"},
		{grpcpolicy.ClientConfig{Policy: bh, FirstMessageTimeout: -1}, "ClientConfig.FirstMessageTimeout"},
		{grpcpolicy.ClientConfig{Policy: bh, IdleTimeout: -1}, "ClientConfig.IdleTimeout"},
		{grpcpolicy.ClientConfig{Methods: map[string]policy.Policy{"wt.Test/Call": bh}}, "ClientConfig.Methods key"},
		{grpcpolicy.ClientConfig{Methods: map[string]policy.Policy{"/wt.Test/": bh}}, "ClientConfig.Methods key"},
		{grpcpolicy.ClientConfig{Methods: map[string]policy.Policy{"/a/b/c": bh}}, "ClientConfig.Methods key"},
		{grpcpolicy.ClientConfig{Methods: map[string]policy.Policy{mCall: nil}}, "ClientConfig.Methods[\"/wt.Test/Call\"] is nil"},
	} {
		_, err := grpcpolicy.NewClient(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "grpcpolicy: ") {
			t.Errorf("NewClient(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := grpcpolicy.NewClient(grpcpolicy.ClientConfig{Methods: map[string]policy.Policy{"/wt.Test": bh, mCall: bh}}); err != nil {
		t.Errorf("valid Methods: %v", err)
	}
}

func TestUnaryRetriesUnavailable(t *testing.T) {
	svc := &service{unary: failWith(2, codes.Unavailable, "")}
	c := newClient(t, grpcpolicy.ClientConfig{Policy: newRetry(t, retry.Config{MaxAttempts: 3})})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	out, err := e.call(t.Context(), mCall, "hi")
	if err != nil || out != "hi" {
		t.Fatalf("call = %q, %v; want hi, nil", out, err)
	}
	if n := svc.ran.Load(); n != 3 {
		t.Errorf("handler ran %d times, want 3", n)
	}
}

func TestUnaryExhaustedKeepsStatus(t *testing.T) {
	svc := &service{unary: failWith(100, codes.Unavailable, "")}
	c := newClient(t, grpcpolicy.ClientConfig{Policy: newRetry(t, retry.Config{MaxAttempts: 2})})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	_, err := e.call(t.Context(), mCall, "hi")
	if status.Code(err) != codes.Unavailable || !errors.Is(err, retry.ErrExhausted) {
		t.Fatalf("err = %v (code %v), want UNAVAILABLE and retry.ErrExhausted", err, status.Code(err))
	}
	var se *grpcpolicy.StatusError
	if !errors.As(err, &se) || se.Code != codes.Unavailable {
		t.Errorf("errors.As StatusError: %v", err)
	}
	if n := svc.ran.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}

// The classification of each code by the default rules, as the caller and
// the policies see it over a real connection.
func TestUnaryDefaultClassification(t *testing.T) {
	for _, tc := range []struct {
		code     codes.Code
		pushback string
		runs     int64 // handler runs with 3 attempts allowed
		failure  bool  // counted by the breaker
	}{
		{codes.Unavailable, "", 3, true},
		{codes.Unavailable, "-1", 1, true},
		{codes.Unavailable, "x", 1, true},
		{codes.ResourceExhausted, "", 1, false},
		{codes.ResourceExhausted, "1", 3, true},
		{codes.Internal, "", 1, true},
		{codes.Unknown, "", 1, true},
		{codes.DataLoss, "", 1, true},
		{codes.DeadlineExceeded, "", 1, true},
		{codes.InvalidArgument, "", 1, false},
		{codes.NotFound, "", 1, false},
		{codes.PermissionDenied, "", 1, false},
		{codes.FailedPrecondition, "", 1, false},
		{codes.Aborted, "", 1, false},
	} {
		t.Run(tc.code.String()+"/"+tc.pushback, func(t *testing.T) {
			svc := &service{unary: failWith(100, tc.code, tc.pushback)}
			br := newBreaker(t, 1)
			pl := newPipeline(t, compose.Policies{Retry: newRetry(t, retry.Config{MaxAttempts: 3}), Breaker: br})
			c := newClient(t, grpcpolicy.ClientConfig{Policy: pl})
			e := newEnv(t, false, svc, nil, c.DialOptions())
			// A breaker of one failure would reject the second attempt:
			// count it by hand instead.
			br.Reset()
			_, err := e.call(t.Context(), mCall, "x")
			if status.Code(err) != tc.code {
				t.Errorf("code = %v, want %v (err %v)", status.Code(err), tc.code, err)
			}
			if n := svc.ran.Load(); tc.failure && tc.runs > 1 {
				// The breaker opens after the first failure: the retry's
				// second attempt is rejected.
				if n != 1 || !strings.Contains(err.Error(), "rejected") {
					t.Errorf("handler ran %d times, err %v; want 1 and a rejected retry", n, err)
				}
			} else if n != tc.runs {
				t.Errorf("handler ran %d times, want %d", n, tc.runs)
			}
			if got := br.State() == breaker.Open; got != tc.failure {
				t.Errorf("breaker open = %v, want %v", got, tc.failure)
			}
			if tc.failure || tc.runs > 1 {
				return
			}
			// The caller's own status comes back exactly as grpc-go gave it.
			if _, ok := err.(interface{ GRPCStatus() *status.Status }); !ok {
				t.Errorf("caller's error %T is not grpc-go's status error", err)
			}
		})
	}
}

func TestUnaryRetriesUnavailableCount(t *testing.T) {
	// Same as above with a breaker that tolerates the failures: the retry
	// runs every attempt.
	svc := &service{unary: failWith(100, codes.ResourceExhausted, "1")}
	pl := newPipeline(t, compose.Policies{Retry: newRetry(t, retry.Config{MaxAttempts: 3}), Breaker: newBreaker(t, 10)})
	c := newClient(t, grpcpolicy.ClientConfig{Policy: pl})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	_, err := e.call(t.Context(), mCall, "x")
	if status.Code(err) != codes.ResourceExhausted || svc.ran.Load() != 3 {
		t.Errorf("err %v after %d runs; want RESOURCE_EXHAUSTED after 3", err, svc.ran.Load())
	}
}

// The server's pushback is the retry's wait, exactly, without jitter.
func TestUnaryPushbackIsTheWait(t *testing.T) {
	svc := &service{unary: failWith(1, codes.Unavailable, "37")}
	var waits []time.Duration
	var mu sync.Mutex
	rt := newRetry(t, retry.Config{MaxAttempts: 2, InitialInterval: time.Millisecond, MaxInterval: time.Second,
		OnRetry: func(_ context.Context, _ int, _ error, wait time.Duration) {
			mu.Lock()
			waits = append(waits, wait)
			mu.Unlock()
		}})
	c := newClient(t, grpcpolicy.ClientConfig{Policy: rt})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	if _, err := e.call(t.Context(), mCall, "x"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(waits) != 1 || waits[0] != 37*time.Millisecond {
		t.Errorf("waits = %v, want [37ms]", waits)
	}
}

// A pushback longer than the retry's MaxInterval ends the call at once.
func TestUnaryPushbackTooLong(t *testing.T) {
	svc := &service{unary: failWith(100, codes.Unavailable, "60000")}
	c := newClient(t, grpcpolicy.ClientConfig{Policy: newRetry(t, retry.Config{MaxAttempts: 3})})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	_, err := e.call(t.Context(), mCall, "x")
	var ex *retry.ExhaustedError
	if !errors.As(err, &ex) || ex.Reason != retry.ReasonRetryAfter || !strings.Contains(err.Error(), "wait 1m0s") {
		t.Fatalf("err = %v, want exhausted for retry_after 1m", err)
	}
	if status.Code(err) != codes.Unavailable || svc.ran.Load() != 1 {
		t.Errorf("code %v, %d runs", status.Code(err), svc.ran.Load())
	}
}

func TestUnaryBreakerRejects(t *testing.T) {
	svc := &service{unary: failWith(2, codes.Internal, "")}
	br := newBreaker(t, 2)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: br})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	for range 2 {
		if _, err := e.call(t.Context(), mCall, "x"); status.Code(err) != codes.Internal {
			t.Fatalf("err = %v, want INTERNAL", err)
		}
	}
	_, err := e.call(t.Context(), mCall, "x")
	if status.Code(err) != codes.Unavailable || !errors.Is(err, policy.ErrRejected) || !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("err = %v (code %v), want UNAVAILABLE matching breaker.ErrOpen", err, status.Code(err))
	}
	if n := svc.ran.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2: a rejected call never reaches the server", n)
	}
}

// A slow method with a bulkhead of its own fills only that bulkhead.
func TestUnarySlowMethodFillsOnlyItsBulkhead(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	svc := &service{unary: func(ctx context.Context, m string, in []byte) ([]byte, error) {
		if m == mSlow {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return in, nil
	}}
	slow := newBulkhead(t, "slow", 2, 0)
	rest := newBulkhead(t, "rest", 2, 0)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: rest, Methods: map[string]policy.Policy{mSlow: slow}})
	e := newEnv(t, true, svc, nil, c.DialOptions())
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, err := e.call(context.Background(), mSlow, "s"); err != nil {
				t.Errorf("slow call: %v", err)
			}
		})
	}
	<-entered
	<-entered
	_, err := e.call(t.Context(), mSlow, "s")
	if status.Code(err) != codes.Unavailable || !errors.Is(err, policy.ErrRejected) {
		t.Errorf("third slow call: %v, want a rejection", err)
	}
	for range 10 {
		if out, err := e.call(t.Context(), mCall, "fast"); err != nil || out != "fast" {
			t.Errorf("fast call = %q, %v", out, err)
		}
	}
	if rest.Active() != 0 || slow.Active() != 2 {
		t.Errorf("active: rest %d, slow %d; want 0 and 2", rest.Active(), slow.Active())
	}
	close(release)
	wg.Wait()
	if slow.Active() != 0 {
		t.Errorf("slow bulkhead still holds %d", slow.Active())
	}
}

// An attempt deadline gives DEADLINE_EXCEEDED matching deadline.ErrExceeded,
// and is not retried by default.
func TestUnaryAttemptDeadline(t *testing.T) {
	svc := &service{unary: func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	br := newBreaker(t, 1)
	pl := newPipeline(t, compose.Policies{
		Retry:   newRetry(t, retry.Config{MaxAttempts: 3}),
		Breaker: br,
		Attempt: newDeadline(t, "attempt", 20*time.Millisecond),
	})
	c := newClient(t, grpcpolicy.ClientConfig{Policy: pl})
	// The attempts are counted as they leave the client (an interceptor
	// inside the policy's): the server may see none of them, on a loaded
	// machine where 20 ms pass before the request reaches the handler.
	var attempts atomic.Int64
	count := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		attempts.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	e := newEnv(t, false, svc, nil, append(c.DialOptions(), count))
	_, err := e.call(t.Context(), mCall, "x")
	if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, deadline.ErrExceeded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v (code %v), want DEADLINE_EXCEEDED matching deadline.ErrExceeded", err, status.Code(err))
	}
	if br.State() != breaker.Open {
		t.Errorf("breaker %v: our attempt deadline is a failure", br.State())
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("%d attempts, want 1: an attempt deadline is not retried by default", n)
	}
	if n := svc.ran.Load(); n > 1 {
		t.Errorf("the server ran %d handlers for one attempt", n)
	}
}

// A Classify that makes attempt timeouts retryable retries them.
func TestUnaryClassifyRetriesAttemptDeadline(t *testing.T) {
	var calls atomic.Int64
	svc := &service{unary: func(ctx context.Context, _ string, in []byte) ([]byte, error) {
		if calls.Add(1) == 1 {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return in, nil
	}}
	// The later attempts answer at once, but on a loaded machine one may
	// still pass a short attempt deadline: room for that.
	pl := newPipeline(t, compose.Policies{
		Retry:   newRetry(t, retry.Config{MaxAttempts: 5}),
		Attempt: newDeadline(t, "attempt", 100*time.Millisecond),
	})
	c := newClient(t, grpcpolicy.ClientConfig{Policy: pl, Classify: func(code codes.Code, pb grpcpolicy.Pushback) grpcpolicy.Verdict {
		if code == codes.DeadlineExceeded {
			return grpcpolicy.Retryable
		}
		return grpcpolicy.DefaultClassify(code, pb)
	}})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	if out, err := e.call(t.Context(), mCall, "x"); err != nil || out != "x" {
		t.Fatalf("call = %q, %v", out, err)
	}
}

// The caller's own cancellation gives CANCELLED, is not retried and is
// not a breaker failure.
func TestUnaryCallerCancel(t *testing.T) {
	entered := make(chan struct{})
	svc := &service{unary: func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	br := newBreaker(t, 1)
	pl := newPipeline(t, compose.Policies{Retry: newRetry(t, retry.Config{MaxAttempts: 3}), Breaker: br})
	c := newClient(t, grpcpolicy.ClientConfig{Policy: pl})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-entered; cancel() }()
	_, err := e.call(ctx, mCall, "x")
	if status.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v (code %v), want CANCELLED", err, status.Code(err))
	}
	if br.State() != breaker.Closed {
		t.Errorf("breaker %v after the caller's cancellation", br.State())
	}
	if svc.ran.Load() != 1 {
		t.Errorf("handler ran %d times", svc.ran.Load())
	}
}

// Methods no policy covers pass straight through.
func TestUnaryUnguardedMethod(t *testing.T) {
	bh := newBulkhead(t, "slow", 1, 0)
	c := newClient(t, grpcpolicy.ClientConfig{Methods: map[string]policy.Policy{mSlow: bh}})
	svc := &service{unary: failWith(1, codes.Unavailable, "")}
	e := newEnv(t, false, svc, nil, c.DialOptions())
	if _, err := e.call(t.Context(), mCall, "x"); status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v", err)
	}
	if _, ok := status.FromError(nil); !ok {
		t.Fatal("unreachable")
	}
}

// The caller's call options are kept, its Trailer option included, and its
// slice is not written to.
func TestUnaryKeepsCallOptions(t *testing.T) {
	svc := &service{unary: func(ctx context.Context, _ string, in []byte) ([]byte, error) {
		grpc.SetTrailer(ctx, metadata.Pairs("k", "v"))
		return in, nil
	}}
	c := newClient(t, grpcpolicy.ClientConfig{Policy: newRetry(t, retry.Config{})})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	var md metadata.MD
	opts := make([]grpc.CallOption, 1, 4)
	opts[0] = grpc.Trailer(&md)
	if _, err := e.call(t.Context(), mCall, "x", opts...); err != nil {
		t.Fatal(err)
	}
	if got := md.Get("k"); len(got) != 1 || got[0] != "v" {
		t.Errorf("trailer = %v", md)
	}
	if extra := opts[:2][1]; extra != nil {
		t.Errorf("the caller's slice was written to: %v", extra)
	}
}

// grpc-go's own retries, enabled by a service config, are turned off by
// DialOptions: the server sees exactly the policy's attempts.
func TestDialOptionsDisableGRPCRetries(t *testing.T) {
	const sc = `{"methodConfig":[{"name":[{"service":"wt.Test"}],"retryPolicy":{"maxAttempts":4,"initialBackoff":"0.001s","maxBackoff":"0.01s","backoffMultiplier":1,"retryableStatusCodes":["UNAVAILABLE"]}}]}`
	for _, tc := range []struct {
		name    string
		disable bool
		want    int64
	}{{"ours only", true, 2}, {"both", false, 8}} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &service{unary: failWith(100, codes.Unavailable, "")}
			c := newClient(t, grpcpolicy.ClientConfig{Policy: newRetry(t, retry.Config{MaxAttempts: 2})})
			opts := []grpc.DialOption{grpc.WithDefaultServiceConfig(sc)}
			if tc.disable {
				opts = append(opts, c.DialOptions()...)
			} else {
				opts = append(opts, grpc.WithChainUnaryInterceptor(c.UnaryInterceptor()))
			}
			e := newEnv(t, false, svc, nil, opts)
			if _, err := e.call(t.Context(), mCall, "x"); status.Code(err) != codes.Unavailable {
				t.Fatalf("err = %v", err)
			}
			if n := svc.ran.Load(); n != tc.want {
				t.Errorf("server saw %d calls, want %d", n, tc.want)
			}
		})
	}
}

// A pushback that says stop is obeyed whatever Classify says.
func TestUnaryPushbackStopOverridesClassify(t *testing.T) {
	svc := &service{unary: failWith(100, codes.Internal, "-1")}
	always := func(codes.Code, grpcpolicy.Pushback) grpcpolicy.Verdict { return grpcpolicy.Retryable }
	c := newClient(t, grpcpolicy.ClientConfig{Policy: newRetry(t, retry.Config{MaxAttempts: 3}), Classify: always})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	_, err := e.call(t.Context(), mCall, "x")
	if status.Code(err) != codes.Internal || errors.Is(err, retry.ErrExhausted) || svc.ran.Load() != 1 {
		t.Fatalf("err %v after %d runs; want INTERNAL at once", err, svc.ran.Load())
	}
	var se *grpcpolicy.StatusError
	if !errors.As(err, &se) || !se.Pushback.Stop {
		t.Errorf("err %v: want a StatusError with the stop", err)
	}
}

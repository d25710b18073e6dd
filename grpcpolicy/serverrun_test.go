package grpcpolicy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/hedge"
	"github.com/watertight/watertight/policy"
)

// goNow is a policy that, as a hedge whose caller cancels just after it
// launched an attempt does, starts fn on a goroutine of its own and
// returns nil as that goroutine starts, after a varying spin, so that the
// attempt's claim lands anywhere around the interceptor's return.
type goNow struct{ wg *sync.WaitGroup }

func (g goNow) Execute(ctx context.Context, fn policy.Func) error {
	g.wg.Add(1)
	var started atomic.Bool
	go func() {
		defer g.wg.Done()
		started.Store(true)
		fn(context.WithoutCancel(ctx))
	}()
	// Spin, not yield: the attempt must run on another processor, in
	// parallel with the interceptor's return, to sweep the window.
	for i := 0; !started.Load(); i++ {
		if i > 1<<20 {
			runtime.Gosched() // one processor free: let it start
		}
	}
	for i, n := 0, rand.IntN(64); i < n; i++ {
		spinSink.Add(1)
	}
	return nil
}

var spinSink atomic.Int64

// lateWindowRuns is how many calls the late-attempt tests make: the
// window they sweep is a few instructions wide. With the code before the
// fix, under -race, both tests failed (the race detector saw the
// interceptor's reads race the late handler's writes) in each of 2 short
// runs; without -race, the unary test saw a handler run late in 1 of 2.
func lateWindowRuns() int {
	if testing.Short() {
		return 20000
	}
	return 50000
}

// An attempt that claims the handler as the interceptor returns either runs
// it before the interceptor reads its results, or not at all: never after
// the interceptor has returned (-race also sees the reads race the
// handler's writes). The code before the fix waited for running handlers,
// then closed the call, and an attempt could claim it in between.
func TestServerLateAttemptWindow(t *testing.T) {
	var wg sync.WaitGroup
	defer wg.Wait()
	s := newServer(t, grpcpolicy.ServerConfig{Policy: goNow{&wg}})
	icpt := s.UnaryInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: mCall}
	var after, okNil, ran int
	var mu sync.Mutex
	for range lateWindowRuns() {
		var returned atomic.Bool
		h := func(context.Context, any) (any, error) {
			mu.Lock()
			ran++
			if returned.Load() {
				after++
			}
			mu.Unlock()
			return "resp", nil
		}
		resp, err := icpt(t.Context(), nil, info, h)
		returned.Store(true)
		if err == nil && resp == nil {
			okNil++
		}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if after > 0 || okNil > 0 {
		t.Errorf("the handler ran after the interceptor returned %d times (of %d runs); the interceptor answered OK with no response %d times", after, ran, okNil)
	}
}

// The same for streams.
func TestServerStreamLateAttemptWindow(t *testing.T) {
	var wg sync.WaitGroup
	defer wg.Wait()
	s := newServer(t, grpcpolicy.ServerConfig{Policy: goNow{&wg}})
	icpt := s.StreamInterceptor()
	info := &grpc.StreamServerInfo{FullMethod: mWatch}
	ss := &fakeServerStream{ctx: t.Context()}
	var after atomic.Int64
	for range lateWindowRuns() {
		var returned atomic.Bool
		h := func(any, grpc.ServerStream) error {
			if returned.Load() {
				after.Add(1)
			}
			return nil
		}
		icpt(nil, ss, info, h)
		returned.Store(true)
	}
	wg.Wait()
	if n := after.Load(); n > 0 {
		t.Errorf("the stream handler ran after the interceptor returned %d times", n)
	}
}

// signalReturn runs inner and closes returned once its Execute has
// returned.
type signalReturn struct {
	inner    policy.Policy
	returned chan struct{}
}

func (p signalReturn) Execute(ctx context.Context, fn policy.Func) error {
	defer close(p.returned)
	return p.inner.Execute(ctx, fn)
}

// hedged is a policy that runs each call with hedge.Do around p: its
// attempts run concurrently, and it returns without waiting for the
// losers.
type hedged struct {
	h *hedge.Hedge
	p policy.Policy
}

func (hp hedged) Execute(ctx context.Context, fn policy.Func) error {
	_, err := hedge.Do(ctx, hp.h, hp.p, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}

// hedgeAfterCancel returns a server whose policy is a hedge (no second
// attempt) around a bulkhead of one slot, wrapped to signal Execute's
// return, and that bulkhead: a handler that cancels its caller's context
// and waits for returned runs after Execute has returned, as a hedge's
// attempt whose client went away mid-call.
func hedgeAfterCancel(t *testing.T) (s *grpcpolicy.Server, returned chan struct{}, active func() int) {
	h, err := hedge.New(hedge.Config{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	bh := newBulkhead(t, "dep", 1, 0)
	returned = make(chan struct{})
	sr := signalReturn{inner: hedged{h, newPipeline(t, compose.Policies{Bulkhead: bh})}, returned: returned}
	return newServer(t, grpcpolicy.ServerConfig{Policy: sr}), returned, bh.Active
}

// callEnd is how a call to an interceptor ended on its goroutine.
type callEnd struct {
	how string // "returned", "panicked" or "goexit"
	val any    // the panic's value, or the error returned
}

// endOf runs call on a goroutine of its own and tells how it ended.
func endOf(call func() error) callEnd {
	out := make(chan callEnd, 1)
	go func() {
		e := callEnd{how: "goexit"}
		defer func() {
			if v := recover(); v != nil {
				e = callEnd{how: "panicked", val: v}
			}
			out <- e
		}()
		err := call()
		e = callEnd{how: "returned", val: err}
	}()
	return <-out
}

// hedgeChild is the environment variable under which the test binary,
// run again by TestServerHedgePanicAfterCancel, runs the call that used to
// kill the process.
const hedgeChild = "WATERTIGHT_GRPCPOLICY_HEDGE_PANIC_CHILD"

// With a hedge as the server's policy, a handler that panics after its
// caller canceled panics on the interceptor's goroutine, where a recovery
// interceptor installed before this one (as the package documentation
// advises) recovers it; and the slot is free. The code before the fix let
// the panic go up the hedge's goroutine after Execute had returned, which
// killed the process: the test runs the calls in a child process, so that
// it fails instead of crashing.
func TestServerHedgePanicAfterCancel(t *testing.T) {
	if kind := os.Getenv(hedgeChild); kind != "" {
		s, returned, active := hedgeAfterCancel(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var e callEnd
		switch kind {
		case "unary":
			handler := func(context.Context, any) (any, error) {
				cancel() // the client goes away mid-call
				<-returned
				panic("handler bug")
			}
			e = endOf(func() error {
				_, err := s.UnaryInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: mCall}, handler)
				return err
			})
		case "stream":
			handler := func(any, grpc.ServerStream) error {
				cancel()
				<-returned
				panic("handler bug")
			}
			e = endOf(func() error {
				return s.StreamInterceptor()(nil, &fakeServerStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: mWatch}, handler)
			})
		}
		if e.how != "panicked" || e.val != "handler bug" {
			t.Errorf("%s: the interceptor's goroutine %s %v; want it to panic with the handler's value", kind, e.how, e.val)
		}
		// The attempt's goroutine frees the slot as its panic unwinds,
		// which may come just after the interceptor's goroutine has the
		// panic: wait for it, within a bound.
		for end := time.Now().Add(5 * time.Second); active() != 0 && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		if n := active(); n != 0 {
			t.Errorf("%s: %d slots held after the panic", kind, n)
		}
		fmt.Println("child done:", kind, e.how)
		return
	}
	for _, kind := range []string{"unary", "stream"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestServerHedgePanicAfterCancel$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), hedgeChild+"="+kind)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "child done: "+kind+" panicked") {
			t.Errorf("%s: the child process failed (%v):\n%s", kind, err, out)
		}
	}
}

// A handler that calls runtime.Goexit after its caller canceled, under a
// hedge, ends the interceptor's goroutine by Goexit too, as it does
// without a hedge (the code before the fix returned nil: an OK with no
// response); the slot is free.
func TestServerHedgeGoexitAfterCancel(t *testing.T) {
	s, returned, active := hedgeAfterCancel(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	handler := func(context.Context, any) (any, error) {
		cancel()
		<-returned
		runtime.Goexit()
		return nil, nil
	}
	e := endOf(func() error {
		_, err := s.UnaryInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: mCall}, handler)
		return err
	})
	if e.how != "goexit" {
		t.Errorf("the interceptor's goroutine %s %v; want runtime.Goexit", e.how, e.val)
	}
	if n := active(); n != 0 {
		t.Errorf("%d slots held after the Goexit", n)
	}
}

// Without a hedge, a handler's panic still reaches the interceptor's
// caller, after the policy has freed its slot and counted a failure.
func TestServerPanicSyncPolicy(t *testing.T) {
	bh := newBulkhead(t, "dep", 1, 0)
	br := newBreaker(t, 1)
	s := newServer(t, grpcpolicy.ServerConfig{Policy: newPipeline(t, compose.Policies{Bulkhead: bh, Breaker: br})})
	e := endOf(func() error {
		_, err := s.UnaryInterceptor()(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: mCall},
			func(context.Context, any) (any, error) { panic("handler bug") })
		return err
	})
	if e.how != "panicked" || e.val != "handler bug" {
		t.Errorf("the interceptor's goroutine %s %v; want the handler's panic", e.how, e.val)
	}
	if n := bh.Active(); n != 0 {
		t.Errorf("%d slots held after the panic", n)
	}
	// The breaker (one failure opens it) counted the panic.
	_, err := s.UnaryInterceptor()(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: mCall},
		func(context.Context, any) (any, error) { return "ok", nil })
	if err == nil {
		t.Error("the breaker did not count the handler's panic as a failure")
	}
}

// A storm of calls through a hedge (a second attempt after a random
// delay, refused by the interceptor) over a bulkhead, whose handlers
// return, fail, panic or Goexit, with callers that cancel at random: each
// handler runs at most once and only while its interceptor runs; each
// panic and Goexit ends its own interceptor's goroutine, and nothing
// else does; no slot is left held, and nothing kills the process.
func TestServerHedgeStorm(t *testing.T) {
	h, err := hedge.New(hedge.Config{Delay: 50 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	bh := newBulkhead(t, "dep", 1000, 0)
	s := newServer(t, grpcpolicy.ServerConfig{Policy: hedged{h, newPipeline(t, compose.Policies{Bulkhead: bh})}})
	icpt, sicpt := s.UnaryInterceptor(), s.StreamInterceptor()
	info, sinfo := &grpc.UnaryServerInfo{FullMethod: mCall}, &grpc.StreamServerInfo{FullMethod: mWatch}
	n := 2000
	if testing.Short() {
		n = 400
	}
	var wg sync.WaitGroup
	var bad atomic.Int64
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			what := rand.IntN(4) // return, fail, panic, Goexit
			cancelAt := rand.IntN(3)
			var runs atomic.Int32
			var inCall atomic.Bool
			inCall.Store(true)
			body := func() {
				if runs.Add(1) > 1 {
					bad.Add(1)
					t.Errorf("call %d: the handler ran twice", i)
				}
				if cancelAt == 1 {
					cancel()
				}
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				if !inCall.Load() {
					bad.Add(1)
					t.Errorf("call %d: the handler ran after the interceptor returned", i)
				}
				switch what {
				case 2:
					panic(i)
				case 3:
					runtime.Goexit()
				}
			}
			if cancelAt == 2 {
				go cancel()
			}
			var e callEnd
			if i%2 == 0 {
				e = endOf(func() error {
					defer inCall.Store(false)
					_, err := icpt(ctx, nil, info, func(context.Context, any) (any, error) {
						body()
						if what == 1 {
							return nil, fmt.Errorf("failed")
						}
						return "ok", nil
					})
					return err
				})
			} else {
				e = endOf(func() error {
					defer inCall.Store(false)
					return sicpt(nil, &fakeServerStream{ctx: ctx}, sinfo, func(any, grpc.ServerStream) error {
						body()
						if what == 1 {
							return fmt.Errorf("failed")
						}
						return nil
					})
				})
			}
			ran := runs.Load() == 1
			switch {
			case ran && what == 2 && (e.how != "panicked" || e.val != i):
				t.Errorf("call %d: the handler panicked; the interceptor's goroutine %s %v", i, e.how, e.val)
			case ran && what == 3 && e.how != "goexit":
				t.Errorf("call %d: the handler called Goexit; the interceptor's goroutine %s %v", i, e.how, e.val)
			case (!ran || what < 2) && e.how != "returned":
				t.Errorf("call %d: the handler ran %v and did not panic; the interceptor's goroutine %s %v", i, ran, e.how, e.val)
			}
		})
	}
	wg.Wait()
	waitFor(t, "every slot freed", func() bool { return bh.Active() == 0 })
}

// afterReturn is a policy that starts fn on a goroutine of its own, which
// calls it only once the test closes release: after the interceptor has
// returned, for certain (hedge_test.go's lateStart calls it as soon as
// its goroutine runs, which may be before the interceptor has closed the
// call: that attempt then runs the handler, and the interceptor waits for
// it, so that test fails in about 1 run of 100 under -race).
type afterReturn struct {
	release chan struct{}
	done    chan error
}

func (a afterReturn) Execute(ctx context.Context, fn policy.Func) error {
	go func() {
		<-a.release
		a.done <- fn(context.WithoutCancel(ctx))
	}()
	return context.Canceled
}

// An attempt that calls fn once the interceptor has returned runs no
// handler and gets an error, unary and stream.
func TestServerAttemptAfterReturnRunsNoHandler(t *testing.T) {
	var ran atomic.Bool
	newPolicy := func() afterReturn { return afterReturn{release: make(chan struct{}), done: make(chan error, 1)} }

	a := newPolicy()
	s := newServer(t, grpcpolicy.ServerConfig{Policy: a})
	handler := func(context.Context, any) (any, error) { ran.Store(true); return "late", nil }
	if _, err := s.UnaryInterceptor()(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: mCall}, handler); err == nil {
		t.Error("unary: no error")
	}
	close(a.release)
	if err := <-a.done; err == nil {
		t.Error("unary: the late attempt succeeded")
	}

	a = newPolicy()
	s = newServer(t, grpcpolicy.ServerConfig{Policy: a})
	sh := func(any, grpc.ServerStream) error { ran.Store(true); return nil }
	if err := s.StreamInterceptor()(nil, &fakeServerStream{ctx: t.Context()}, &grpc.StreamServerInfo{FullMethod: mWatch}, sh); err == nil {
		t.Error("stream: no error")
	}
	close(a.release)
	if err := <-a.done; err == nil {
		t.Error("stream: the late attempt succeeded")
	}
	if ran.Load() {
		t.Error("a handler ran after its interceptor returned")
	}
}

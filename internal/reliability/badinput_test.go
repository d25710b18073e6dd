package reliability

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// newErr calls New and returns its error, or "panic: ..." if it panicked.
func newErr[C, P any](newFn func(C) (P, error), cfg C) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	_, err = newFn(cfg)
	return err
}

// TestConfigErrors is one table over the invalid values of every Config
// field of every package: each must make New return an error (never panic)
// that starts "<pkg>: Config.<Field> " (the convention: package prefix,
// then the field named as the user writes it). compose's errors follow the
// same rule with "compose: " and the Policies field or the name.
func TestConfigErrors(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	bh := func(c bulkhead.Config) error { return newErr(bulkhead.New, c) }
	dl := func(c deadline.Config) error { return newErr(deadline.New, c) }
	rt := func(c retry.Config) error { return newErr(retry.New, c) }
	br := func(c breaker.Config) error { return newErr(breaker.New, c) }
	d1, _ := deadline.New(deadline.Config{Timeout: time.Second})
	d2, _ := deadline.New(deadline.Config{Timeout: 2 * time.Second})
	var nilBulkhead *bulkhead.Bulkhead
	cp := func(name string, p compose.Policies) error {
		return newErr(func(p compose.Policies) (*compose.Pipeline, error) { return compose.New(name, p) }, p)
	}
	tests := []struct {
		name   string
		err    error
		prefix string
	}{
		{"bulkhead Limit 0", bh(bulkhead.Config{}), "bulkhead: Config.Limit "},
		{"bulkhead Limit -1", bh(bulkhead.Config{Limit: -1}), "bulkhead: Config.Limit "},
		{"bulkhead Limit MinInt", bh(bulkhead.Config{Limit: math.MinInt}), "bulkhead: Config.Limit "},
		{"bulkhead MaxQueue -2", bh(bulkhead.Config{Limit: 1, MaxQueue: -2}), "bulkhead: Config.MaxQueue "},
		{"bulkhead MaxQueue MinInt", bh(bulkhead.Config{Limit: 1, MaxQueue: math.MinInt}), "bulkhead: Config.MaxQueue "},
		{"bulkhead MaxWait -1", bh(bulkhead.Config{Limit: 1, MaxWait: -1}), "bulkhead: Config.MaxWait "},
		{"bulkhead MaxWait MinInt64", bh(bulkhead.Config{Limit: 1, MaxWait: math.MinInt64}), "bulkhead: Config.MaxWait "},
		{"deadline Timeout 0", dl(deadline.Config{}), "deadline: Config.Timeout "},
		{"deadline Timeout -1", dl(deadline.Config{Timeout: -1}), "deadline: Config.Timeout "},
		{"deadline Timeout MinInt64", dl(deadline.Config{Timeout: math.MinInt64}), "deadline: Config.Timeout "},
		{"retry MaxAttempts -1", rt(retry.Config{MaxAttempts: -1}), "retry: Config.MaxAttempts "},
		{"retry MaxAttempts MinInt", rt(retry.Config{MaxAttempts: math.MinInt}), "retry: Config.MaxAttempts "},
		{"retry InitialInterval -1", rt(retry.Config{InitialInterval: -1}), "retry: Config.InitialInterval "},
		{"retry MaxInterval -1", rt(retry.Config{MaxInterval: -1}), "retry: Config.MaxInterval "},
		{"retry MaxInterval < InitialInterval", rt(retry.Config{InitialInterval: time.Second, MaxInterval: time.Millisecond}), "retry: Config.MaxInterval "},
		{"retry default MaxInterval < InitialInterval", rt(retry.Config{InitialInterval: time.Minute}), "retry: Config.MaxInterval "},
		{"retry Jitter 1.5", rt(retry.Config{Jitter: 1.5}), "retry: Config.Jitter "},
		{"retry Jitter NaN", rt(retry.Config{Jitter: nan}), "retry: Config.Jitter "},
		{"retry Jitter +Inf", rt(retry.Config{Jitter: inf}), "retry: Config.Jitter "},
		{"breaker FailureRatio -0.1", br(breaker.Config{FailureRatio: -0.1}), "breaker: Config.FailureRatio "},
		{"breaker FailureRatio 1.1", br(breaker.Config{FailureRatio: 1.1}), "breaker: Config.FailureRatio "},
		{"breaker FailureRatio NaN", br(breaker.Config{FailureRatio: nan}), "breaker: Config.FailureRatio "},
		{"breaker FailureRatio +Inf", br(breaker.Config{FailureRatio: inf}), "breaker: Config.FailureRatio "},
		{"breaker Window -1", br(breaker.Config{Window: -1}), "breaker: Config.Window "},
		{"breaker OpenTimeout -1", br(breaker.Config{OpenTimeout: -1}), "breaker: Config.OpenTimeout "},
		{"breaker OpenTimeout MinInt64", br(breaker.Config{OpenTimeout: math.MinInt64}), "breaker: Config.OpenTimeout "},
		{"compose empty name", cp("", compose.Policies{}), "compose: name "},
		{"compose typed nil", cp("x", compose.Policies{Bulkhead: nilBulkhead}), "compose: Policies.Bulkhead "},
		{"compose Attempt > Deadline", cp("x", compose.Policies{Deadline: d1, Attempt: d2}), "compose: Policies.Attempt "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil || !strings.HasPrefix(tt.err.Error(), tt.prefix) {
				t.Fatalf("error %v; want one starting %q", tt.err, tt.prefix)
			}
		})
	}
}

// TestNilArguments: a nil ctx or a nil fn is a programmer error, and every
// entry point panics with a message naming its package.
func TestNilArguments(t *testing.T) {
	bh, _ := bulkhead.New(bulkhead.Config{Limit: 1})
	defer bh.Close()
	dl, _ := deadline.New(deadline.Config{Timeout: time.Second})
	rt, _ := retry.New(retry.Config{})
	br, _ := breaker.New(breaker.Config{})
	defer br.Close()
	p, _ := compose.New("nil", compose.Policies{Bulkhead: bh, Deadline: dl, Retry: rt, Breaker: br})
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	var nilCtx context.Context
	tests := []struct {
		name string
		call func()
		want string
	}{
		{"bulkhead Execute ctx", func() { bh.Execute(nilCtx, fn) }, "bulkhead: nil Context"},
		{"bulkhead Execute fn", func() { bh.Execute(ctx, nil) }, "bulkhead: nil fn"},
		{"bulkhead Acquire ctx", func() { bh.Acquire(nilCtx) }, "bulkhead: nil Context"},
		{"deadline Execute ctx", func() { dl.Execute(nilCtx, fn) }, "deadline: nil Context"},
		{"deadline Execute fn", func() { dl.Execute(ctx, nil) }, "deadline: nil fn"},
		{"deadline Start ctx", func() { dl.Start(nilCtx) }, "deadline: nil Context"},
		{"retry Execute ctx", func() { rt.Execute(nilCtx, fn) }, "retry: nil Context"},
		{"retry Execute fn", func() { rt.Execute(ctx, nil) }, "retry: nil fn"},
		{"retry Attempt ctx", func() { retry.Attempt(nilCtx) }, "retry: nil Context"},
		{"breaker Execute ctx", func() { br.Execute(nilCtx, fn) }, "breaker: nil Context"},
		{"breaker Execute fn", func() { br.Execute(ctx, nil) }, "breaker: nil fn"},
		{"breaker Allow ctx", func() { br.Allow(nilCtx) }, "breaker: nil Context"},
		{"compose Execute ctx", func() { p.Execute(nilCtx, fn) }, "compose: nil Context"},
		{"compose Execute fn", func() { p.Execute(ctx, nil) }, "compose: nil fn"},
		{"compose Start ctx", func() { p.Start(nilCtx, fn) }, "compose: nil Context"},
		{"compose Start fn", func() { p.Start(ctx, nil) }, "compose: nil fn"},
		{"policy.Do fn", func() { policy.Do[int](ctx, p, nil) }, "policy: nil fn"},
		// Do passes ctx on to the policy, which names itself.
		{"policy.Do ctx", func() {
			policy.Do(nilCtx, p, func(context.Context) (int, error) { return 1, nil })
		}, "compose: nil Context"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if r := recover(); fmt.Sprint(r) != tt.want {
					t.Fatalf("panic %v; want %q", r, tt.want)
				}
			}()
			tt.call()
		})
	}
	if bh.Active() != 0 {
		t.Fatalf("Active = %d after the panics", bh.Active())
	}
}

// within runs f and fails the test unless it returns within 5 s (real
// time): an extreme value must not make a call spin or hang.
func within(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not return within 5s")
	}
}

// TestExtremeValues runs calls through each policy, and through a pipeline
// of all of them, configured with the extreme values every Config allows:
// nothing overflows, spins or hangs, and each behaves as documented.
// Time-dependent cases run in synctest bubbles, where fake time lets a
// policy sleep for centuries in no time.
func TestExtremeValues(t *testing.T) {
	ok := func(context.Context) error { return nil }
	ctx := context.Background()
	t.Run("bulkhead Limit MaxInt", func(t *testing.T) {
		within(t, func() {
			b, err := bulkhead.New(bulkhead.Config{Limit: math.MaxInt})
			if err != nil {
				t.Error(err)
				return
			}
			defer b.Close()
			var held []bulkhead.Permit
			for range 100 {
				p, err := b.Acquire(ctx)
				if err != nil {
					t.Error(err)
				}
				held = append(held, p)
			}
			if err := b.Execute(ctx, ok); err != nil || b.Active() != 100 {
				t.Errorf("Execute = %v, Active %d", err, b.Active())
			}
			for _, p := range held {
				p.Release()
			}
		})
	})
	t.Run("bulkhead MaxQueue Unbounded MaxWait MaxInt64", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b, err := bulkhead.New(bulkhead.Config{Limit: 1, MaxQueue: bulkhead.Unbounded, MaxWait: math.MaxInt64})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			held, _ := b.Acquire(ctx)
			errs := make(chan error, 1000)
			for range 1000 {
				go func() { errs <- b.Execute(ctx, ok) }()
			}
			synctest.Wait()
			time.Sleep(100 * 365 * 24 * time.Hour) // a century of fake time
			synctest.Wait()
			if b.Queued() != 1000 {
				t.Fatalf("Queued = %d after a century; want all 1000 still waiting", b.Queued())
			}
			held.Release()
			for range 1000 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if b.Active() != 0 || b.Queued() != 0 {
				t.Fatalf("Active, Queued = %d, %d", b.Active(), b.Queued())
			}
		})
	})
	t.Run("deadline Timeout MaxInt64", func(t *testing.T) {
		within(t, func() {
			d, _ := deadline.New(deadline.Config{Timeout: math.MaxInt64})
			err := d.Execute(ctx, func(ctx context.Context) error {
				if _, ok := ctx.Deadline(); ok {
					return errors.New("a deadline was set past the year 2262")
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	})
	t.Run("retry MaxAttempts MaxInt with Permanent", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r, _ := retry.New(retry.Config{MaxAttempts: math.MaxInt})
			stop := errors.New("stop")
			n := 0
			err := r.Execute(ctx, func(context.Context) error {
				if n++; n == 5 {
					return policy.Permanent(stop)
				}
				return errSoak
			})
			if err != stop || n != 5 {
				t.Fatalf("Execute = %v after %d attempts; want the permanent error after 5", err, n)
			}
		})
	})
	t.Run("retry MaxInterval MaxInt64", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var waits []time.Duration
			r, _ := retry.New(retry.Config{MaxAttempts: 6, InitialInterval: math.MaxInt64 / 4, MaxInterval: math.MaxInt64,
				OnRetry: func(_ context.Context, _ int, _ error, w time.Duration) { waits = append(waits, w) }})
			r.Execute(ctx, func(context.Context) error { return errSoak })
			// Each wait doubles from MaxInt64/4, +-50%, capped at
			// MaxInterval: never collapsed to nothing by an overflow.
			for i, w := range waits {
				if w < time.Duration(math.MaxInt64/8)-time.Second {
					t.Fatalf("waits %v: wait %d collapsed", waits, i+1)
				}
			}
		})
	})
	t.Run("breaker OpenTimeout MaxInt64", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b, _ := breaker.New(breaker.Config{ConsecutiveFailures: 1, OpenTimeout: math.MaxInt64})
			defer b.Close()
			b.Execute(ctx, func(context.Context) error { return errSoak })
			time.Sleep(200 * 365 * 24 * time.Hour)
			if err := b.Execute(ctx, ok); !errors.Is(err, breaker.ErrOpen) || b.State() != breaker.Open {
				t.Fatalf("after two centuries: %v, state %v; want still open", err, b.State())
			}
			b.Reset()
			if err := b.Execute(ctx, ok); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("breaker Window MaxInt64", func(t *testing.T) {
		within(t, func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Execute panicked: %v", r)
				}
			}()
			b, err := breaker.New(breaker.Config{FailureRatio: 0.5, MinRequests: 1, Window: math.MaxInt64})
			if err != nil {
				t.Error(err)
				return
			}
			defer b.Close()
			if err := b.Execute(ctx, ok); err != nil {
				t.Error(err)
			}
			b.Execute(ctx, func(context.Context) error { return errSoak })
			if b.State() != breaker.Open {
				t.Errorf("state %v after 1 failure in 2 calls with ratio 0.5; want open", b.State())
			}
		})
	})
	t.Run("pipeline of extremes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			bh, _ := bulkhead.New(bulkhead.Config{Limit: math.MaxInt, MaxQueue: bulkhead.Unbounded, MaxWait: math.MaxInt64})
			defer bh.Close()
			dl, _ := deadline.New(deadline.Config{Timeout: math.MaxInt64})
			rt, _ := retry.New(retry.Config{MaxAttempts: math.MaxInt, InitialInterval: time.Nanosecond, MaxInterval: math.MaxInt64})
			br, _ := breaker.New(breaker.Config{ConsecutiveFailures: math.MaxUint32, OpenTimeout: math.MaxInt64, HalfOpenRequests: math.MaxUint32})
			defer br.Close()
			p, err := compose.New("extreme", compose.Policies{Bulkhead: bh, Deadline: dl, Retry: rt, Breaker: br, Attempt: dl})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			err = p.Execute(ctx, func(context.Context) error {
				if n++; n == 10 {
					return nil
				}
				return errSoak
			})
			if err != nil || n != 10 || br.State() != breaker.Closed || bh.Active() != 0 {
				t.Fatalf("Execute = %v after %d attempts, breaker %v, Active %d", err, n, br.State(), bh.Active())
			}
		})
	})
}

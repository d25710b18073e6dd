package httppolicy_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
)

// When the caller's context ends as a failure status arrives, the caller
// gets the context's error: never the *StatusError the Transport carries
// the status in to its policies.
func TestCallerEndAsFailureStatusArrives(t *testing.T) {
	policies := []struct {
		name string
		new  func(t *testing.T) policy.Policy
	}{
		{"pipeline with retry and breaker", func(t *testing.T) policy.Policy {
			return newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil), Breaker: newBreaker(t, 5)})
		}},
		{"empty pipeline", func(t *testing.T) policy.Policy { return newPipeline(t, compose.Policies{}) }},
		{"retry alone", func(t *testing.T) policy.Policy { return newRetry(t, 3, nil) }},
		{"policy of the user's", func(t *testing.T) policy.Policy { return &plainPolicy{} }},
	}
	ends := []struct {
		name string
		// start returns the caller's context and what the base does as
		// the status arrives.
		start func() (context.Context, func(), func())
	}{
		{"canceled", func() (context.Context, func(), func()) {
			ctx, cancel := context.WithCancel(context.Background())
			return ctx, cancel, cancel
		}},
		{"deadline passed", func() (context.Context, func(), func()) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			// A base that ignores the context answers after the deadline.
			return ctx, func() { time.Sleep(2 * time.Second) }, cancel
		}},
	}
	for _, code := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		for _, p := range policies {
			for _, end := range ends {
				t.Run(strconv.Itoa(code)+"/"+p.name+"/"+end.name, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						ctx, atAnswer, cancel := end.start()
						defer cancel()
						base := &fakeBase{fn: func(n int, req *http.Request) (*http.Response, error) {
							atAnswer()
							return response(code, "busy", "Retry-After", "1"), nil
						}}
						tr := &httppolicy.Transport{Base: base, Policy: p.new(t)}
						resp, err := get(t, tr, ctx)
						if resp != nil {
							resp.Body.Close()
							t.Fatalf("got a %d response, want the context's error", resp.StatusCode)
						}
						if !errors.Is(err, ctx.Err()) {
							t.Fatalf("err = %v (%T), want %v", err, err, ctx.Err())
						}
						if se, ok := errors.AsType[*httppolicy.StatusError](err); ok {
							t.Fatalf("err = %v carries a *StatusError (%d)", err, se.StatusCode)
						}
						synctest.Wait()
						for i, b := range base.bodies {
							if !b.closed.Load() {
								t.Fatalf("body of attempt %d left open", i+1)
							}
						}
					})
				})
			}
		}
	}
}

// A caller whose context ends while the retry waits out a failure
// status's Retry-After gets the context's error too.
func TestCallerEndDuringRetryAfterWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		base := &fakeBase{fn: func(n int, req *http.Request) (*http.Response, error) {
			time.AfterFunc(500*time.Millisecond, cancel)
			return response(http.StatusServiceUnavailable, "busy", "Retry-After", "1"), nil
		}}
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)})}
		resp, err := get(t, tr, ctx)
		if resp != nil {
			resp.Body.Close()
			t.Fatalf("got a %d response, want context.Canceled", resp.StatusCode)
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if _, ok := errors.AsType[*httppolicy.StatusError](err); ok {
			t.Fatalf("err = %v carries a *StatusError", err)
		}
		if base.count() != 1 {
			t.Fatalf("%d attempts, want 1", base.count())
		}
	})
}

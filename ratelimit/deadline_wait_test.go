package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
)

// TestWaitEndedByDeadlineIsRejection checks that an attempt held by the
// Limiter whose ctx a Deadline's timer ends (its cause matches
// deadline.ErrExceeded) never ran fn, so it is the Limiter's rejection,
// with the reason of the wait it was in, and not a timeout.
func TestWaitEndedByDeadlineIsRejection(t *testing.T) {
	waits := []struct {
		name, reason string
		cfg          ratelimit.Config
		prepare      func(l *ratelimit.Limiter)
	}{
		{"hold", ratelimit.ReasonThrottled, ratelimit.Config{}, func(l *ratelimit.Limiter) {
			observe(l, resp(429, "Retry-After", "10"))
		}},
		{"rate", ratelimit.ReasonRate, ratelimit.Config{RequestsPerSecond: 0.1, Burst: 1}, func(l *ratelimit.Limiter) {
			l.Execute(context.Background(), ok)
		}},
	}
	for _, w := range waits {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLimiter(t, w.cfg)
				w.prepare(l)
				// A ctx ended as a Deadline's timer ends it, whose deadline
				// the Limiter does not see in advance (as when the timer's
				// goroutine wins the race against the Limiter's own).
				ctx, cancel := context.WithDeadlineCause(context.Background(), time.Now().Add(time.Second), deadline.ErrExceeded)
				defer cancel()
				err := l.Execute(lateDeadline{ctx}, func(context.Context) error { t.Error("fn ran"); return nil })
				checkRejection(t, err, w.reason)
				if errors.Is(err, deadline.ErrExceeded) || errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err = %v matches a timeout", err)
				}
			})
		})
	}
}

// lateDeadline hides its deadline until it is done.
type lateDeadline struct{ context.Context }

func (c lateDeadline) Deadline() (time.Time, bool) {
	if c.Err() == nil {
		return time.Time{}, false
	}
	return c.Context.Deadline()
}

// TestWaitEndedByCallerIsCtxErr checks the caller's side: a wait that the
// caller's own context ends returns ctx.Err(), not a rejection, even when
// the caller cancels with a Deadline's error as the cause (as
// errgroup.WithContext does with a sibling's error).
func TestWaitEndedByCallerIsCtxErr(t *testing.T) {
	for _, cause := range []error{context.DeadlineExceeded, deadline.ErrExceeded} {
		t.Run(cause.Error(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLimiter(t, ratelimit.Config{})
				observe(l, resp(429, "Retry-After", "10"))
				ctx, cancel := context.WithCancelCause(context.Background())
				time.AfterFunc(time.Second, func() { cancel(cause) })
				err := l.Execute(ctx, func(context.Context) error { t.Error("fn ran"); return nil })
				if !errors.Is(err, context.Canceled) || errors.Is(err, policy.ErrRejected) {
					t.Errorf("err = %v, want ctx.Err()", err)
				}
			})
		})
	}
}

// TestNoRateNoRateReason checks that a Limiter with no client-side rate
// never rejects with reason "rate": an attempt whose deadline has come,
// behind the gate after a hold has ended, is rejected as throttled.
func TestNoRateNoRateReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		observe(l, resp(429, "Retry-After", "1"))
		time.Sleep(2 * time.Second)
		ctx, cancel := context.WithDeadline(context.Background(), time.Now())
		defer cancel()
		checkRejection(t, l.Execute(ctx, ok), ratelimit.ReasonThrottled)
	})
}

// A retried attempt that waits behind the gate when a Deadline's timer
// fires ends with ctx.Err(): fn ran in the call, so the call is the
// Deadline's timeout, counted once, and no rejection is recorded.
func TestRetriedWaitEndedByDeadlineIsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rejected int
		l := newLimiter(t, ratelimit.Config{OnReject: func(context.Context, *policy.RejectedError) { rejected++ }})
		r, err := retry.New(retry.Config{MaxAttempts: 3, InitialInterval: time.Millisecond, Jitter: -1})
		if err != nil {
			t.Fatal(err)
		}
		d, err := deadline.New(deadline.Config{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		defer close(release)
		errBoom := errors.New("boom")
		err = d.Execute(context.Background(), func(ctx context.Context) error {
			return r.Execute(ctx, func(ctx context.Context) error {
				return l.Execute(ctx, func(ctx context.Context) error {
					if retry.Attempt(ctx) > 1 {
						t.Error("a retried attempt ran behind the gate")
					}
					// A hold, then the gate: a probe goes, which never
					// answers, and the timed release comes after the deadline.
					l.HoldFor(600 * time.Millisecond)
					go l.Execute(context.Background(), func(context.Context) error { <-release; return nil })
					time.Sleep(700 * time.Millisecond)
					return errBoom
				})
			})
		})
		if !errors.Is(err, deadline.ErrExceeded) || errors.Is(err, policy.ErrRejected) || errors.Is(err, retry.ErrExhausted) || rejected != 0 {
			t.Errorf("err = %v, %d rejections recorded; want our timeout alone", err, rejected)
		}
	})
}

// A waiter woken by the gate's opening at the instant its Deadline's timer
// fires is never admitted: fn would run at its deadline, with a context
// about to end. The wake and the timer race, so the test repeats.
func TestWaiterWokenAtItsDeadlineIsNotAdmitted(t *testing.T) {
	for range 200 {
		synctest.Test(t, func(t *testing.T) {
			l := newLimiter(t, ratelimit.Config{})
			l.HoldFor(500 * time.Millisecond)
			go l.Execute(context.Background(), func(context.Context) error {
				time.Sleep(500 * time.Millisecond) // the probe's success opens the gate at 1 s
				return nil
			})
			time.Sleep(600 * time.Millisecond)
			ctx, cancel := context.WithDeadlineCause(context.Background(), time.Now().Add(400*time.Millisecond), deadline.ErrExceeded)
			defer cancel()
			err := l.Execute(ctx, func(ctx context.Context) error {
				if dl, _ := ctx.Deadline(); !time.Now().Before(dl) {
					t.Errorf("admitted at its deadline (ctx: %v)", ctx.Err())
				}
				return nil
			})
			if err != nil {
				checkRejection(t, err, ratelimit.ReasonThrottled)
			}
		})
	}
}

// A retry above the Deadline that fired does not count: a wait in an
// inner pipeline (Deadline, RateLimit), called from an outer pipeline's
// second retry attempt, is the inner call's rejection, as fn never ran in
// the inner call.
func TestWaitInNestedPipelineIgnoresOuterRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rejected, timeouts int
		l := newLimiter(t, ratelimit.Config{OnReject: func(context.Context, *policy.RejectedError) { rejected++ }})
		innerDl, err := deadline.New(deadline.Config{Name: "inner", Timeout: 150 * time.Millisecond, OnTimeout: func(context.Context, time.Duration) { timeouts++ }})
		if err != nil {
			t.Fatal(err)
		}
		inner, err := compose.New("inner", compose.Policies{Deadline: innerDl, RateLimit: l})
		if err != nil {
			t.Fatal(err)
		}
		// The second attempt starts at 500 ms, after the probe went at 350 ms;
		// the timed release (700 ms) comes after its inner deadline (650 ms).
		r, err := retry.New(retry.Config{MaxAttempts: 2, InitialInterval: 400 * time.Millisecond, Jitter: -1})
		if err != nil {
			t.Fatal(err)
		}
		outer, err := compose.New("outer", compose.Policies{Retry: r})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		defer close(release)
		var second error
		outer.Execute(context.Background(), func(ctx context.Context) error {
			n := retry.Attempt(ctx)
			err := inner.Execute(ctx, func(ctx context.Context) error {
				if n > 1 {
					t.Error("the inner call ran behind the gate")
				}
				// A hold, then the gate: a probe goes, which never answers.
				l.HoldFor(350 * time.Millisecond)
				go l.Execute(context.Background(), func(context.Context) error { <-release; return nil })
				time.Sleep(100 * time.Millisecond)
				return errors.New("boom")
			})
			if n == 2 {
				second = err
			}
			return err
		})
		if !errors.Is(second, policy.ErrRejected) || errors.Is(second, deadline.ErrExceeded) || rejected != 1 || timeouts != 0 {
			t.Errorf("inner call of the outer second attempt: %v, %d rejections, %d timeouts recorded; want the rate limit's rejection, counted once", second, rejected, timeouts)
		}
	})
}

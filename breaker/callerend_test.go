package breaker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/hedge"
)

var errOwn = errors.New("attempt's own error")

func newTripOnFirst(t *testing.T) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(breaker.Config{ConsecutiveFailures: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestCallersEndIsExcluded checks that the end of the caller's own context,
// canceled or past its deadline, and a hedge's lost attempt, are neither a
// success nor a failure, whatever fn returns once the ctx has ended: a
// breaker that trips on the first failure stays closed with nothing
// counted.
func TestCallersEndIsExcluded(t *testing.T) {
	ends := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Second)
		}},
		{"canceled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Second, cancel)
			return ctx, cancel
		}},
		{"canceled with a cause", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(time.Second, func() { cancel(errors.New("client went away")) })
			return ctx, func() { cancel(nil) }
		}},
		// errgroup.WithContext cancels the group with a sibling's error,
		// which may be a Deadline's: still the caller's end, not our timer.
		{"canceled with a Deadline's error as cause", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(time.Second, func() { cancel(&deadline.ExceededError{Name: "sibling", Duration: time.Second}) })
			return ctx, func() { cancel(nil) }
		}},
		{"hedge lost", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(time.Second, func() { cancel(hedge.ErrLost) })
			return ctx, func() { cancel(nil) }
		}},
	}
	returns := []struct {
		name string
		fn   func(ctx context.Context) error
	}{
		{"ctx.Err()", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		{"its own error", func(ctx context.Context) error { <-ctx.Done(); return errOwn }},
		{"nil", func(ctx context.Context) error { <-ctx.Done(); return nil }},
	}
	for _, end := range ends {
		for _, ret := range returns {
			t.Run(end.name+"/"+ret.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					b := newTripOnFirst(t)
					ctx, cancel := end.ctx()
					defer cancel()
					b.Execute(ctx, ret.fn)
					if s, c := b.State(), b.Counts(); s != breaker.Closed || c.TotalFailures != 0 || c.TotalSuccesses != 0 {
						t.Errorf("state %v, counts %+v; want closed with nothing counted", s, c)
					}
				})
			})
		}
	}
}

// TestOurTimeoutsAreFailures checks that a timeout of ours is a failure: a
// Deadline outside the breaker whose timer ends fn's ctx, and an attempt
// timeout inside it (fn returns ErrExceeded while the breaker's ctx is
// live). So is a DeadlineExceeded that fn returns on its own.
func TestOurTimeoutsAreFailures(t *testing.T) {
	cases := []struct {
		name string
		run  func(b *breaker.Breaker, d *deadline.Deadline)
	}{
		{"whole-call deadline outside", func(b *breaker.Breaker, d *deadline.Deadline) {
			d.Execute(context.Background(), func(ctx context.Context) error {
				return b.Execute(ctx, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
			})
		}},
		{"attempt deadline inside", func(b *breaker.Breaker, d *deadline.Deadline) {
			b.Execute(context.Background(), func(ctx context.Context) error {
				return d.Execute(ctx, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
			})
		}},
		{"fn's own DeadlineExceeded", func(b *breaker.Breaker, d *deadline.Deadline) {
			b.Execute(context.Background(), func(ctx context.Context) error { return context.DeadlineExceeded })
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newTripOnFirst(t)
				d, err := deadline.New(deadline.Config{Timeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				c.run(b, d)
				if s := b.State(); s != breaker.Open {
					t.Errorf("state %v, counts %+v; want open after one timeout", s, b.Counts())
				}
			})
		})
	}
}

// TestHedgeLosersAreExcluded checks a Breaker as the policy of
// hedge.Do (no compose): each attempt runs through it, and the
// attempts that lose, even when they return an error of their own, are
// not counted. The breaker opens on the third consecutive failure; the
// hedge wins ten calls, each with losers behind it.
func TestHedgeLosersAreExcluded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := breaker.New(breaker.Config{ConsecutiveFailures: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		h, err := hedge.New(hedge.Config{MaxHedges: 2, Delay: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			var attempts atomic.Int32
			_, err := hedge.Do(context.Background(), h, b, func(ctx context.Context) (int32, error) {
				n := attempts.Add(1)
				if n == 3 { // the last hedge wins at once
					return n, nil
				}
				<-ctx.Done()
				return 0, errOwn
			})
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		if s, c := b.State(), b.Counts(); s != breaker.Closed || c.TotalFailures != 0 {
			t.Errorf("state %v, counts %+v; want closed with no failure", s, c)
		}
	})
}

// TestIsFailureMayCallTheBreaker checks that IsFailure runs outside every
// lock: it may read the Breaker's state and counts.
func TestIsFailureMayCallTheBreaker(t *testing.T) {
	var b *breaker.Breaker
	seen := 0
	b, err := breaker.New(breaker.Config{ConsecutiveFailures: 2, IsFailure: func(error) bool {
		if b.State() == breaker.Closed {
			seen += int(b.Counts().TotalFailures) + 1
		}
		return true
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2 {
			b.Execute(context.Background(), func(context.Context) error { return errOwn })
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("IsFailure calling the Breaker deadlocked")
	}
	if seen != 3 || b.State() != breaker.Open {
		t.Errorf("seen %d, state %v; want 1 + 2 and open", seen, b.State())
	}
}

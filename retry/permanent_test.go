package retry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cenkalti/backoff/v4"

	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// wrapped stands for a policy between fn and a Retry that wraps fn's
// error in an error of its own (an attempt deadline's ExceededError).
type wrapped struct{ err error }

func (w *wrapped) Error() string { return "wrapped: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

// A marker stops the nearest Retry only: an outer Retry that sees the same
// error (still wrapped, so the marker cannot be taken off) retries it as
// any other error.
func TestPermanentStopsOnlyTheNearestRetry(t *testing.T) {
	noWait := func() backoff.BackOff { return &backoff.ZeroBackOff{} }
	inner, err := retry.New(retry.Config{Name: "inner", MaxAttempts: 3, NewSchedule: noWait})
	if err != nil {
		t.Fatal(err)
	}
	outer, err := retry.New(retry.Config{Name: "outer", MaxAttempts: 3, NewSchedule: noWait})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	calls := 0
	err = outer.Execute(context.Background(), func(ctx context.Context) error {
		return inner.Execute(ctx, func(context.Context) error {
			calls++
			return &wrapped{policy.Permanent(boom)}
		})
	})
	if calls != 3 {
		t.Errorf("fn ran %d times; want 3: once per outer attempt (the inner Retry stops on the marker, the outer one must not)", calls)
	}
	if !errors.Is(err, retry.ErrExhausted) || !errors.Is(err, boom) {
		t.Errorf("err = %v; want the outer Retry exhausted with boom", err)
	}
}

// Unmark takes off a marker on the outside, and settles one inside a
// wrapper: a Retry given Unmark's result no longer honours it, while the
// error fn returned is left unchanged (a Retry given it again still stops).
func TestUnmarkLeavesTheErrorUnchanged(t *testing.T) {
	boom := errors.New("boom")
	if got := policy.Unmark(policy.Permanent(boom)); got != boom {
		t.Errorf("Unmark(Permanent(boom)) = %v; want boom itself", got)
	}
	if got := policy.Unmark(boom); got != boom {
		t.Errorf("Unmark(boom) = %v; want boom itself", got)
	}
	w := &wrapped{policy.Permanent(boom)}
	got := policy.Unmark(w)
	var as *wrapped
	if got.Error() != w.Error() || !errors.Is(got, boom) || !errors.As(got, &as) || as != w {
		t.Errorf("Unmark(wrapped) = %v; want w's message, matching boom and w", got)
	}
	r, err := retry.New(retry.Config{MaxAttempts: 2, NewSchedule: func() backoff.BackOff { return &backoff.ZeroBackOff{} }})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	err = r.Execute(context.Background(), func(context.Context) error { calls++; return got })
	if calls != 2 || !errors.Is(err, retry.ErrExhausted) {
		t.Errorf("a Retry honoured a settled marker: %d calls, %v", calls, fmt.Sprint(err))
	}
	calls = 0
	r.Execute(context.Background(), func(context.Context) error { calls++; return w })
	if calls != 1 {
		t.Errorf("after Unmark, w's own marker no longer stopped a Retry: %d calls", calls)
	}
}

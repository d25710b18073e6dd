package breaker_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
)

// TestSnapshotCounts checks that a snapshot's counts are those Counts
// returns, the window rolled, and that taking one reports no change.
func TestSnapshotCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		changes := 0
		b, err := breaker.New(breaker.Config{FailureRatio: 0.9, MinRequests: 100, Window: 10 * time.Second,
			OnStateChange: func(breaker.State, breaker.State) { changes++ }})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		for range 3 {
			b.Execute(context.Background(), func(context.Context) error { return errors.New("down") })
		}
		if s := b.Snapshot(); s.State != breaker.Closed || s.Counts.TotalFailures != 3 || s.Counts != b.Counts() {
			t.Errorf("Snapshot %+v; want closed with the 3 failures Counts returns", s)
		}
		time.Sleep(time.Minute)
		if s := b.Snapshot(); s.Counts != (breaker.Counts{}) {
			t.Errorf("a minute after a 10s window: Snapshot counts %+v; want none", s.Counts)
		}
		if changes != 0 {
			t.Errorf("%d state changes reported; want none", changes)
		}
	})
}

// TestSnapshotOpenHalfOpen checks the state and its end around an open
// period, read without reporting a change.
func TestSnapshotOpenHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		changes := 0
		b, err := breaker.New(breaker.Config{ConsecutiveFailures: 1, OpenTimeout: 30 * time.Second,
			OnStateChange: func(breaker.State, breaker.State) { changes++ }})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		b.Execute(context.Background(), func(context.Context) error { return errors.New("down") })
		opened := time.Now()
		if s := b.Snapshot(); s.State != breaker.Open || !s.Until.Equal(opened.Add(30*time.Second)) || s.Counts != (breaker.Counts{}) {
			t.Errorf("Snapshot %+v; want open until 30s from now, no counts", s)
		}
		seen := changes
		time.Sleep(30 * time.Second)
		if s := b.Snapshot(); s.State != breaker.HalfOpen || !s.Until.IsZero() || changes != seen {
			t.Errorf("after the open timeout: Snapshot %+v, %d changes reported (were %d); want half-open and none", s, changes, seen)
		}
		b.ForceOpen()
		if s := b.Snapshot(); s.State != breaker.Open || !s.Forced {
			t.Errorf("forced: Snapshot %+v; want open, forced", s)
		}
	})
}

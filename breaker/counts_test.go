package breaker

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// wantCounts checks b.Counts.
func wantCounts(t *testing.T, b *Breaker, when string, want Counts) {
	t.Helper()
	if got := b.Counts(); got != want {
		t.Fatalf("%s: Counts = %+v, want %+v", when, got, want)
	}
}

// TestCounts follows the counts through a breaker's life: closed (calls
// still running included, excluded outcomes apart), forced open, reset,
// open, half-open with its probes, and closed again.
func TestCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log hookLog
		b := newBreaker(t, Config{ConsecutiveFailures: 3, OpenTimeout: time.Second, HalfOpenRequests: 2, OnStateChange: log.hook})
		wantCounts(t, b, "new", Counts{})
		call(b, nil)
		call(b, errBoom)
		call(b, errBoom)
		wantCounts(t, b, "success, 2 failures", Counts{Requests: 3, TotalSuccesses: 1, TotalFailures: 2, ConsecutiveFailures: 2})
		call(b, context.Canceled)
		wantCounts(t, b, "then excluded", Counts{Requests: 4, TotalSuccesses: 1, TotalFailures: 2, TotalExclusions: 1, ConsecutiveFailures: 2})
		ctx, tok, err := b.Enter(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		wantCounts(t, b, "a call running", Counts{Requests: 5, TotalSuccesses: 1, TotalFailures: 2, TotalExclusions: 1, ConsecutiveFailures: 2})
		b.Exit(ctx, tok, nil)
		wantCounts(t, b, "it succeeded", Counts{Requests: 5, TotalSuccesses: 2, TotalFailures: 2, TotalExclusions: 1, ConsecutiveSuccesses: 1})

		b.ForceOpen()
		wantCounts(t, b, "forced open", Counts{})
		call(b, nil)
		wantCounts(t, b, "forced open, a call rejected", Counts{})
		b.Reset()
		wantCounts(t, b, "reset", Counts{})
		call(b, nil)
		wantCounts(t, b, "reset, a success", Counts{Requests: 1, TotalSuccesses: 1, ConsecutiveSuccesses: 1})

		trip(t, b, 3)
		wantCounts(t, b, "open", Counts{})
		time.Sleep(time.Second)
		// Counts alone turns it half-open, as State does, and reports it.
		wantCounts(t, b, "half-open", Counts{})
		want := []string{"closed->open", "open->closed", "closed->open", "open->half-open"}
		if got := log.list(); !slices.Equal(got, want) {
			t.Fatalf("transitions = %v, want %v", got, want)
		}
		ctx, tok, err = b.Enter(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		call(b, nil)
		wantCounts(t, b, "half-open, a probe running, one succeeded", Counts{Requests: 2, TotalSuccesses: 1, ConsecutiveSuccesses: 1})
		b.Exit(ctx, tok, nil)
		wantCounts(t, b, "closed by the probes", Counts{})
		if s := b.State(); s != Closed {
			t.Fatalf("after 2 good probes: %v, want closed", s)
		}
	})
}

// TestCountsWindow checks that the counts of a rolling window forget
// outcomes a bucket at a time, without a call to move it on.
func TestCountsWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{FailureRatio: 1, MinRequests: 100, Window: time.Second})
		call(b, errBoom)
		call(b, nil)
		wantCounts(t, b, "t=0", Counts{Requests: 2, TotalSuccesses: 1, TotalFailures: 1, ConsecutiveSuccesses: 1})
		time.Sleep(500 * time.Millisecond)
		call(b, errBoom)
		wantCounts(t, b, "t=500ms", Counts{Requests: 3, TotalSuccesses: 1, TotalFailures: 2, ConsecutiveFailures: 1})
		time.Sleep(600 * time.Millisecond)
		wantCounts(t, b, "t=1.1s, the first bucket gone", Counts{Requests: 1, TotalFailures: 1, ConsecutiveFailures: 1})
		time.Sleep(500 * time.Millisecond)
		wantCounts(t, b, "t=1.6s, all gone", Counts{})
	})
}

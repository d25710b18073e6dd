package retry

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/policy"
)

var (
	errClaimedFatal   = errors.New("400 bad request")
	errClaimedSpoiled = errors.New("spoiled after the claim")
	errClaimedFlaky   = errors.New("503")
)

// claimedRun runs a call through a Hedge with a 5 ms delay and MaxHedges
// 2 in which attempt 2 claims at once (as policy.Do does when fn succeeds)
// and fails 25 ms later (a policy below turned its success into a
// failure), while attempt 1 fails with first at 15 ms. It returns the
// call's error and how many attempts ran fn.
func claimedRun(t *testing.T, cfg HedgeConfig, first error) (error, int32) {
	t.Helper()
	cfg.Delay, cfg.MaxHedges = 5*time.Millisecond, 2
	h, err := NewHedge(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	err = h.Execute(context.Background(), func(ctx context.Context) error {
		calls.Add(1)
		switch Attempt(ctx) {
		case 1:
			time.Sleep(15 * time.Millisecond)
			return first
		case 2:
			if !policy.Claim(ctx) {
				t.Error("attempt 2 did not get the claim")
			}
			time.Sleep(25 * time.Millisecond)
			return errClaimedSpoiled
		}
		return nil
	})
	synctest.Wait()
	return err, calls.Load()
}

// A Permanent failure that arrives while another attempt holds the claim
// is kept: when the claim holder fails, the call ends with it, unmarked,
// and no attempt starts after it.
func TestHedgePermanentWhileClaimedEndsCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		err, calls := claimedRun(t, HedgeConfig{}, Permanent(errClaimedFatal))
		if calls != 2 {
			t.Errorf("fn ran %d times, want 2: an attempt started after a permanent failure", calls)
		}
		if !errors.Is(err, errClaimedFatal) || isPermanent(err) {
			t.Errorf("err = %v, want the permanent failure, unmarked", err)
		}
	})
}

// Likewise for a failure that ShouldRetry refuses.
func TestHedgeShouldRetryFalseWhileClaimedEndsCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := HedgeConfig{ShouldRetry: func(err error) bool { return !errors.Is(err, errClaimedFatal) }}
		err, calls := claimedRun(t, cfg, errClaimedFatal)
		if calls != 2 || err != errClaimedFatal {
			t.Errorf("fn ran %d times, err = %v; want 2 and the refused failure", calls, err)
		}
	})
}

// A refusal while another attempt holds the claim stops the hedges: once
// the claim holder fails, no attempt starts, and the call is exhausted
// with reason "rejected".
func TestHedgeRejectedWhileClaimedStopsHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rej := &policy.RejectedError{}
		err, calls := claimedRun(t, HedgeConfig{}, rej)
		var ee *ExhaustedError
		if calls != 2 || !errors.As(err, &ee) || ee.Reason != ReasonRejected || !errors.Is(err, errClaimedSpoiled) {
			t.Errorf("fn ran %d times, err = %v; want 2 and exhausted (rejected) with the claim holder's failure", calls, err)
		}
	})
}

// An ordinary failure while another attempt holds the claim counts: after
// the claim holder fails, the hedge goes on (attempt 3), and the
// exhaustion counts every attempt that failed.
func TestHedgeFailureWhileClaimedCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := NewHedge(HedgeConfig{Delay: 5 * time.Millisecond, MaxHedges: 2})
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int32
		err = h.Execute(context.Background(), func(ctx context.Context) error {
			calls.Add(1)
			switch Attempt(ctx) {
			case 1:
				time.Sleep(15 * time.Millisecond)
				return errClaimedFlaky
			case 2:
				policy.Claim(ctx)
				time.Sleep(25 * time.Millisecond)
				return errClaimedSpoiled
			}
			return errClaimedFlaky
		})
		synctest.Wait()
		var ee *ExhaustedError
		if calls.Load() != 3 || !errors.As(err, &ee) || ee.Attempts != 3 || ee.Reason != ReasonMaxAttempts {
			t.Errorf("fn ran %d times, err = %v (%+v); want 3 and exhausted after 3 attempts", calls.Load(), err, ee)
		}
	})
}

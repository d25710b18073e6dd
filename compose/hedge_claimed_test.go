package compose_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

var (
	errClaimedFatal   = errors.New("400 bad request")
	errClaimedSpoiled = errors.New("spoiled")
)

// spoilSecond stands for a policy below the hedge that turns attempt 2's
// success into a failure 20 ms after policy.Do claimed (a validation, an
// Attempt slot's check).
type spoilSecond struct{}

func (spoilSecond) Execute(ctx context.Context, fn policy.Func) error {
	err := fn(ctx)
	if err == nil && retry.Attempt(ctx) == 2 {
		time.Sleep(20 * time.Millisecond)
		return errClaimedSpoiled
	}
	return err
}

// Through a pipeline: attempt 1 fails permanently while attempt 2, whose
// success Do claimed, holds the claim; attempt 2's success is then turned
// into a failure. The call ends with the permanent failure, and no third
// attempt starts.
func TestHedgePermanentWhileClaimedThroughPipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := retry.NewHedge(retry.HedgeConfig{Delay: 5 * time.Millisecond, MaxHedges: 2})
		if err != nil {
			t.Fatal(err)
		}
		p, err := compose.New("dep", compose.Policies{Retry: h, Breaker: spoilSecond{}})
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int32
		_, err = policy.Do(context.Background(), p, func(ctx context.Context) (string, error) {
			calls.Add(1)
			switch retry.Attempt(ctx) {
			case 1:
				time.Sleep(15 * time.Millisecond)
				return "", retry.Permanent(errClaimedFatal)
			case 2:
				// Claims at 7 ms, before the next hedge's delay is up.
				time.Sleep(2 * time.Millisecond)
				return "two", nil
			}
			return "three", nil
		})
		synctest.Wait()
		if calls.Load() != 2 {
			t.Errorf("fn ran %d times, want 2: an attempt started after a permanent failure", calls.Load())
		}
		if !errors.Is(err, errClaimedFatal) {
			t.Errorf("err = %v, want the permanent failure", err)
		}
	})
}

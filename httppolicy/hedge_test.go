package httppolicy_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/retry"
)

// A policy that runs attempts concurrently (retry.Hedge) is refused
// loudly, not raced: the attempt started beside a running one fails at
// once with an error that says why, and RoundTrip returns only once the
// running attempt has (-race checks that nothing else touches the
// exchange).
func TestHedgeRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := retry.NewHedge(retry.HedgeConfig{Delay: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var running, maxRunning atomic.Int32
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			r := running.Add(1)
			defer running.Add(-1)
			if r > maxRunning.Load() {
				maxRunning.Store(r)
			}
			select {
			case <-time.After(time.Second):
			case <-req.Context().Done():
				return nil, nil, req.Context().Err()
			}
			resp, b := fedResponse(req, 200, "", false, step{0, "late"})
			return resp, b, nil
		}}
		bh := newBulkhead(t, 1, 0)
		for _, fb := range []time.Duration{0, 5 * time.Second} {
			tr := &httppolicy.Transport{Base: base, FirstByteTimeout: fb, Policy: newPipeline(t, compose.Policies{Bulkhead: bh, Retry: h})}
			_, err = get(t, tr, context.Background())
			if err == nil || !strings.Contains(err.Error(), "two attempts of a request at once") {
				t.Fatalf("err = %v, want the hedge refused", err)
			}
			synctest.Wait()
			if maxRunning.Load() != 1 || running.Load() != 0 || bh.Active() != 0 {
				t.Fatalf("at most %d attempts at once, %d still running, Active %d", maxRunning.Load(), running.Load(), bh.Active())
			}
		}
	})
}

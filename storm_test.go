package watertight_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// TestHTTPClientStorm sends a storm through NewHTTPClient's client against
// a real server that answers late, fails, or hangs mid-body, while callers
// cancel at random and some stop reading half-way: every request returns,
// and at the end the bulkhead holds no slot and no waiter, and no
// goroutine or connection is left (goleak, in TestMain).
func TestHTTPClientStorm(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch rand.IntN(5) {
		case 0:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 1: // headers and half a body, then a hang until the client gives up
			w.Write([]byte("half"))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		default:
			time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
			io.WriteString(w, "ok")
		}
	}))
	defer srv.Close()
	defer close(stop)

	c, err := watertight.NewHTTPClient("storm", watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 4, MaxQueue: 8, MaxWait: 50 * time.Millisecond},
		Deadline: &deadline.Config{Timeout: 200 * time.Millisecond},
		Retry:    &retry.Config{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond},
		Breaker:  &breaker.Config{ConsecutiveFailures: 10, OpenTimeout: 20 * time.Millisecond},
		Attempt:  &deadline.Config{Timeout: 100 * time.Millisecond},
	}, watertight.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var rejected, ok, failed atomic.Int64
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond) // arrivals spread over 100 ms
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%4 == 0 { // a caller that gives up at a random moment
				time.AfterFunc(time.Duration(rand.IntN(30))*time.Millisecond, cancel)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			resp, err := c.Do(req)
			switch {
			case errors.Is(err, policy.ErrRejected):
				rejected.Add(1)
				return
			case err != nil:
				failed.Add(1)
				return
			}
			if i%5 == 0 { // stop reading half-way
				buf := make([]byte, 1)
				resp.Body.Read(buf)
			} else {
				io.Copy(io.Discard, resp.Body)
			}
			resp.Body.Close()
			ok.Add(1)
		}()
	}
	wg.Wait()
	bh := c.Pipeline.Bulkhead()
	if bh.Active() != 0 || bh.Queued() != 0 {
		t.Errorf("after the storm: Active %d, Queued %d; want 0, 0", bh.Active(), bh.Queued())
	}
	if ok.Load() == 0 || rejected.Load()+failed.Load() == 0 {
		t.Errorf("ok %d, rejected %d, failed %d: the storm did not exercise both paths", ok.Load(), rejected.Load(), failed.Load())
	}
	t.Logf("ok %d, rejected %d, failed %d", ok.Load(), rejected.Load(), failed.Load())
}

package httppolicy_test

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
)

// TestStress sends many concurrent requests that read their bodies to the
// end, close them early, break, fail or are canceled mid-stream, and checks
// that no more bodies are open at once than the bulkhead's limit (a body's
// Close returns only after its slot is free) and that nothing leaks.
func TestStress(t *testing.T) {
	const limit, workers, perWorker = 4, 32, 15
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/fail":
			w.WriteHeader(503)
			return
		case "/broken":
			w.Header().Set("Content-Length", "1000")
			io.WriteString(w, "x")
			http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}
		rc := http.NewResponseController(w)
		for i := 0; i < 20; i++ {
			if _, err := io.WriteString(w, strings.Repeat("y", 64)); err != nil {
				return
			}
			rc.Flush()
			if i%5 == 0 {
				time.Sleep(100 * time.Microsecond)
			}
		}
	})
	bh, err := bulkhead.New(bulkhead.Config{Name: "dep", Limit: limit, MaxQueue: bulkhead.Unbounded})
	if err != nil {
		t.Fatal(err)
	}
	defer bh.Close()
	tr := &httppolicy.Transport{Base: newBase(t, limit), Policy: newPipeline(t, compose.Policies{
		Bulkhead: bh, Deadline: newDeadline(t, 5*time.Second), Retry: newRetry(t, 2, nil), Breaker: newBreaker(t, 1000),
	})}

	var open, maxOpen atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range perWorker {
				path := []string{"/ok", "/ok", "/ok", "/fail", "/broken"}[rng.IntN(5)]
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
				if rng.IntN(10) == 0 {
					cancel() // canceled before or while queued
				}
				resp, err := tr.RoundTrip(req)
				if err != nil {
					cancel()
					continue
				}
				if resp.StatusCode != 200 || path == "/broken" || ctx.Err() != nil {
					// Failure responses are in memory and hold no slot;
					// broken or canceled streams free theirs at a read we
					// cannot point to. Not counting them keeps
					// open <= slots held.
					resp.Body.Close()
					cancel()
					continue
				}
				n := open.Add(1)
				for m := maxOpen.Load(); n > m && !maxOpen.CompareAndSwap(m, n); m = maxOpen.Load() {
				}
				// Each case stops counting the body just before the action
				// that frees its slot.
				switch rng.IntN(3) {
				case 0: // to EOF: the last Read frees the slot
					// All but the last byte: a Read that fills the whole
					// body may see its end and free the slot before the
					// count drops, and the next call's body would be
					// counted beside this one.
					io.ReadFull(resp.Body, make([]byte, 20*64-1))
					open.Add(-1)
					io.Copy(io.Discard, resp.Body)
				case 1: // closed early
					resp.Body.Read(make([]byte, 10))
					open.Add(-1)
				case 2: // canceled mid-stream
					resp.Body.Read(make([]byte, 10))
					open.Add(-1)
					cancel()
					io.Copy(io.Discard, resp.Body)
				}
				resp.Body.Close()
				cancel()
			}
		})
	}
	wg.Wait()
	if m := maxOpen.Load(); m > limit {
		t.Fatalf("%d bodies open at once, limit %d", m, limit)
	}
	if bh.Active() != 0 || bh.Queued() != 0 {
		t.Fatalf("Active %d, Queued %d after the storm", bh.Active(), bh.Queued())
	}
}

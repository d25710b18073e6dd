package adaptive_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
)

// slowBody streams its text once released, then ends.
type slowBody struct {
	release <-chan struct{}
	r       io.Reader
}

func (b *slowBody) Read(p []byte) (int, error) {
	<-b.release
	return b.r.Read(p)
}

func (b *slowBody) Close() error { return nil }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTransportStreamsDuringAProbe: through httppolicy's Transport (the
// limiter by itself, and in a pipeline), a response whose headers arrived
// stops counting against a probe's cap of 3 at once, while its body keeps
// the call, and its slot, open: 6 streams are admitted where the cap of 3
// slots admitted 3, and every count is freed when the bodies are read.
func TestTransportStreamsDuringAProbe(t *testing.T) {
	for _, inPipeline := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			l := mustNew(t, adaptive.Config{InitialLimit: 6})
			var p policy.Policy = l
			if inPipeline {
				p = mustPipeline(t, compose.Policies{Bulkhead: l})
			}
			release := make(chan struct{})
			endBodies := sync.OnceFunc(func() { close(release) })
			tr := &httppolicy.Transport{
				Policy: p,
				Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					time.Sleep(10 * time.Millisecond) // the headers
					return &http.Response{StatusCode: 200, Header: http.Header{}, Request: r,
						Body: &slowBody{release, strings.NewReader("data: the answer\n\n")}}, nil
				}),
			}
			client := &http.Client{Transport: tr}
			var wg sync.WaitGroup
			defer wg.Wait()
			defer endBodies()
			var mu sync.Mutex
			var bodies []io.ReadCloser
			defer func() { // on a failure too, so that every call ends
				mu.Lock()
				defer mu.Unlock()
				for _, b := range bodies {
					b.Close()
				}
			}()
			get := func(n int) (rejected int) {
				var rej sync.WaitGroup
				var count int
				var cmu sync.Mutex
				for range n {
					rej.Go(func() {
						req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://dep/stream", nil)
						resp, err := client.Do(req)
						if err != nil {
							if !errors.Is(err, policy.ErrRejected) {
								t.Errorf("Do: %v", err)
							}
							cmu.Lock()
							count++
							cmu.Unlock()
							return
						}
						mu.Lock()
						bodies = append(bodies, resp.Body)
						mu.Unlock()
					})
				}
				rej.Wait()
				return count
			}
			if got := get(4); got != 1 {
				t.Fatalf("pipeline %v: 4 requests at the probe's cap of 3: %d rejected; want 1", inPipeline, got)
			}
			if l.Answered() != 3 || l.Active() != 3 || l.Admission() != 6 {
				t.Fatalf("pipeline %v: 3 streams answered: answered %d, active %d, admission %d; want 3, 3, 6",
					inPipeline, l.Answered(), l.Active(), l.Admission())
			}
			if got := get(4); got != 1 {
				t.Fatalf("pipeline %v: 4 more beside 3 answered streams, limit 6: %d rejected; want 1", inPipeline, got)
			}
			endBodies()
			for _, b := range bodies {
				wg.Go(func() {
					if data, err := io.ReadAll(b); err != nil || string(data) != "data: the answer\n\n" {
						t.Errorf("body %q, %v", data, err)
					}
					b.Close()
				})
			}
			wg.Wait()
			synctest.Wait()
			checkCounts(t, l, 0, 0)
			if l.Answered() != 0 {
				t.Fatalf("answered %d after every body was read", l.Answered())
			}
		})
	}
}

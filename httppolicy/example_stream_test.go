package httppolicy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/retry"
)

// A streamed completion: the first replica sends its headers and
// keepalives, then no token; the retry goes to a healthy one. Later, a
// stream stalls mid-way behind keepalives, and the idle timeout ends it.
func ExampleTransport_streamTimeouts() {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		flush := http.NewResponseController(w).Flush
		switch hits.Add(1) {
		case 1: // stuck before the first token
			io.WriteString(w, ": ping\n\n")
			flush()
			<-r.Context().Done()
		case 2:
			io.WriteString(w, "data: Hello\n\ndata: [DONE]\n\n")
		default: // one token, then only keepalives
			io.WriteString(w, "data: Hi\n\n")
			for {
				flush()
				select {
				case <-time.After(10 * time.Millisecond):
					io.WriteString(w, "event: ping\ndata: {\"type\": \"ping\"}\n\n")
				case <-r.Context().Done():
					return
				}
			}
		}
	}))
	defer srv.Close()

	dl, _ := deadline.New(deadline.Config{Name: "llm", Timeout: 30 * time.Second})
	rt, _ := retry.New(retry.Config{Name: "llm", MaxAttempts: 3})
	pipeline, _ := compose.New("llm", compose.Policies{Deadline: dl, Retry: rt}) // no Attempt: streams
	base := httppolicy.NewDependencyTransport(10)
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: &httppolicy.Transport{
		Base: base, Policy: pipeline, Name: "llm",
		FirstByteTimeout: time.Second,
		IdleTimeout:      500 * time.Millisecond,
	}}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("%q after %d attempts\n", body, hits.Load())

	resp, err = client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("%q, then: %v\n", body[:10], err)
	fmt.Println(errors.Is(err, httppolicy.ErrIdleTimeout), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// "data: Hello\n\ndata: [DONE]\n\n" after 2 attempts
	// "data: Hi\n\n", then: httppolicy "llm": no data for 500ms: httppolicy: stream idle timeout exceeded
	// true true
}

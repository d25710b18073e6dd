package httppolicy_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
)

// A data: event larger than the 1 MiB cap on keepalives is the first
// event, not a keepalive: a GET with a first byte timeout gets it, sent
// once.
func TestLargeFirstEventIsData(t *testing.T) {
	tests := []struct {
		name   string
		before string // keepalives before the event
		event  string
	}{
		{"one 2 MiB data line", commentPing, "data: " + strings.Repeat("x", 2<<20) + "\n\n"},
		{"2 MiB of short data lines", "", strings.Repeat("data: "+strings.Repeat("y", 1017)+"\n", 2<<10) + "\n"},
		{"after nearly 1 MiB of keepalives", strings.Repeat(commentPing, (1<<20-64<<10)/len(commentPing)),
			"event: image\ndata: " + strings.Repeat("z", 2<<20) + "\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hits atomic.Int32
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, tt.before)
				io.WriteString(w, tt.event)
				io.WriteString(w, "data: [DONE]\n\n")
			})
			tr := &httppolicy.Transport{Base: newBase(t, 1), FirstByteTimeout: time.Minute,
				Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)})}
			req, _ := http.NewRequest("GET", srv.URL, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip: %v (server hit %d times)", err, hits.Load())
			}
			body := readAll(t, resp.Body)
			resp.Body.Close()
			if want := tt.before + tt.event + "data: [DONE]\n\n"; body != want {
				t.Fatalf("body of %d bytes, want %d", len(body), len(want))
			}
			if n := hits.Load(); n != 1 {
				t.Fatalf("server hit %d times, want 1", n)
			}
		})
	}
}

// A large event streamed slowly keeps the idle timer from firing: its
// data, past the size of any keepalive, restarts it as it comes.
func TestLargeEventStreamedSlowlyIsNotIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 3 * time.Second
		chunk := strings.Repeat("x", 64<<10)
		steps := []step{{0, openaiChunk}, {0, "event: image\ndata: "}}
		for range 32 {
			steps = append(steps, step{time.Second, chunk})
		}
		steps = append(steps, step{time.Second, "\n\n"})
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "text/event-stream", false, steps...)
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: time.Second, IdleTimeout: idle,
			Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)})}
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got := readAll(t, resp.Body)
		if want := openaiChunk + "event: image\ndata: " + strings.Repeat(chunk, 32) + "\n\n"; got != want {
			t.Fatalf("read %d bytes, want %d", len(got), len(want))
		}
		if base.count() != 1 {
			t.Fatalf("%d attempts, want 1", base.count())
		}
	})
}

// A large event is the first byte as soon as more of its data than any
// keepalive's is in, before its end: the first byte timer stops then.
func TestLargeEventBringsFirstByteBeforeItsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "text/event-stream", true,
				step{0, ": ping\n\ndata: " + strings.Repeat("x", 64<<10)})
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: time.Second,
			Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)})}
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if base.count() != 1 {
			t.Fatalf("%d attempts, want 1", base.count())
		}
	})
}

package httppolicy_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
)

// readEventStream reads, with an idle timeout of 1s, an event stream that
// sends openaiChunk at once, then steps, then ends. It returns what the
// caller read, the Read error and how long after the start it came.
func readEventStream(t *testing.T, steps ...step) (got string, err error, at time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "text/event-stream", false, append([]step{{0, openaiChunk}}, steps...)...)
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, IdleTimeout: time.Second, Policy: newPipeline(t, compose.Policies{})}
		start := time.Now()
		resp, rerr := get(t, tr, context.Background())
		if rerr != nil {
			t.Fatal(rerr)
		}
		defer resp.Body.Close()
		b, rerr := io.ReadAll(resp.Body)
		got, err, at = string(b), rerr, time.Since(start)
	})
	return got, err, at
}

// An event that comes in pieces restarts the idle timer only once it is
// complete: the waits for its pieces, and for keepalives before it, add
// up, and the stream is cut when they reach the idle timeout.
func TestIdleTimeoutWaitsAddUpWithinAnEvent(t *testing.T) {
	piece := strings.Repeat("x", 64)
	var pieces []step
	for range 10 {
		pieces = append(pieces, step{300 * time.Millisecond, piece})
	}
	tests := []struct {
		name  string
		steps []step
		read  string // after the first event, when the timer fires at 1s
	}{
		{"64-byte pieces every 300ms", append([]step{{0, "data: "}}, pieces...), "data: " + strings.Repeat(piece, 3)},
		{"a keepalive, then an event in pieces", []step{{500 * time.Millisecond, commentPing},
			{300 * time.Millisecond, "data: "}, {300 * time.Millisecond, "hi\n\n"}}, commentPing + "data: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err, at := readEventStream(t, tt.steps...)
			isStreamTimeout(t, err, httppolicy.ErrIdleTimeout)
			if at != time.Second {
				t.Fatalf("cut after %v, want 1s: the waits add up", at)
			}
			if want := openaiChunk + tt.read; got != want {
				t.Fatalf("read %q, want %q", got, want)
			}
		})
	}
}

// Each event that counts restarts the idle timer: events that each come
// in pieces within the idle timeout are not cut, however long the stream.
func TestIdleTimeoutRestartsAtEachCompleteEvent(t *testing.T) {
	var steps []step
	for range 5 {
		steps = append(steps, step{300 * time.Millisecond, "data: "}, step{300 * time.Millisecond, "hi"},
			step{300 * time.Millisecond, "\n\n"})
	}
	got, err, _ := readEventStream(t, steps...)
	if err != nil {
		t.Fatalf("stream cut after %q: %v", got, err)
	}
	if want := openaiChunk + strings.Repeat("data: hi\n\n", 5); got != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

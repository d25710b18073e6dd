package httppolicy_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
)

// firstEventOutcome feeds steps, then hangs, to a Transport with a first
// byte timeout of 1s, and returns RoundTrip's error.
func firstEventOutcome(t *testing.T, steps ...step) error {
	var out error
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "text/event-stream", true, steps...)
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: time.Second,
			Policy: newPipeline(t, compose.Policies{})}
		resp, err := get(t, tr, context.Background())
		if err == nil {
			resp.Body.Close()
		}
		out = err
	})
	return out
}

// exactMiB is exactly 1 MiB of comment lines.
var exactMiB = strings.Repeat(": p\n", (1<<20)/4)

// The lines of the event being read, its field names, event:, id: and
// data: lines alike, do not count toward the 1 MiB of keepalives allowed
// before the first event, however the reads split them.
func TestKeepaliveLimitLeavesOutTheEventBeingRead(t *testing.T) {
	const wait = 100 * time.Millisecond
	tests := []struct {
		name  string
		steps []step
	}{
		{"data in one read", []step{{0, exactMiB}, {wait, "data: hi\n\n"}}},
		{"data split after its field name", []step{{0, exactMiB}, {wait, "data: "}, {wait, "hi\n\n"}}},
		{"event: line read before the data", []step{{0, exactMiB}, {wait, "event: delta\n"}, {wait, "data: hi\n\n"}}},
		{"id: line read before the data", []step{{0, exactMiB[1:]}, {wait, "id: 1\n"}, {wait, "data: hi\n\n"}}},
		{"retry: and CRLF split in two", []step{{0, exactMiB}, {wait, "retry: 10\r"}, {wait, "\ndata: hi\r\n\r\n"}}},
		{"event split byte by byte", append([]step{{0, exactMiB}}, bytewise("event: delta\nid: 7\ndata: hi\n\n")...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := firstEventOutcome(t, tt.steps...); err != nil {
				t.Fatalf("1 MiB of keepalives, then an event: %v", err)
			}
		})
	}
}

func bytewise(s string) []step {
	steps := make([]step, len(s))
	for i := range s {
		steps[i] = step{10 * time.Millisecond, s[i : i+1]}
	}
	return steps
}

// Exactly 1 MiB of keepalives, then an event split in two reads at any
// byte: the event is the first byte.
func TestKeepaliveLimitWhateverTheReadBoundaries(t *testing.T) {
	ka := strings.Repeat(": "+strings.Repeat("p", 1020)+"\n\n", 1<<10)
	for cut := 1; cut < len(anthropicText); cut++ {
		if err := firstEventOutcome(t, step{0, ka + anthropicText[:cut]}, step{0, anthropicText[cut:]}); err != nil {
			t.Fatalf("1 MiB of keepalives, then %q | %q: %v", anthropicText[:cut], anthropicText[cut:], err)
		}
	}
}

// A keepalive event counts toward the limit once it is complete, all of
// its lines included; so do blank lines and events without data.
func TestKeepaliveLimitCountsWholeKeepaliveEvents(t *testing.T) {
	tests := []struct {
		name, after string
	}{
		{"a ping event", "event: ping\ndata: {}\n\n"},
		{"a ping event with CRLF", "event: ping\r\ndata: {}\r\n\r\n"},
		{"an event without data", "event: delta\nid: 3\n\n"},
		{"a blank line", "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := firstEventOutcome(t, step{0, exactMiB}, step{0, tt.after})
			if err == nil || !strings.Contains(err.Error(), "more than 1 MiB of keepalives") {
				t.Fatalf("err = %v, want more than 1 MiB of keepalives", err)
			}
		})
	}
}

// An event that never counts cannot hold more than 1 MiB in memory
// either: lines without data (or with empty data) fail the attempt.
func TestKeepaliveLimitBoundsAnEventThatDoesNotCount(t *testing.T) {
	for _, line := range []string{"id: 1\n", "data:\n", "event: delta\n"} {
		t.Run(strings.TrimSpace(line), func(t *testing.T) {
			lines := strings.Repeat(line, (1<<20)/len(line)+1)
			err := firstEventOutcome(t, step{0, lines})
			if err == nil || !strings.Contains(err.Error(), "more than 1 MiB in the event being read") {
				t.Fatalf("err = %v, want more than 1 MiB in the event being read", err)
			}
		})
	}
}

package ratelimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/watertight/watertight/ratelimit"
)

// An Anthropic reset is a time on the server's clock: it is read against
// the response's Date header, so a server clock ahead or behind ours does
// not lengthen or shorten the hold (a spent bucket of 50, full in 60 s,
// holds 1.2 s), nor drop it (61 s behind, the reset was in our past). A
// response without a valid Date is read against our clock.
func TestHoldReadsAnthropicResetsOnTheServersClock(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	h := func(server time.Time, date string) http.Header {
		h := hdr("anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "0",
			"anthropic-ratelimit-requests-reset", server.Add(time.Minute).Format(time.RFC3339))
		if date != "" {
			h.Set("Date", date)
		}
		return h
	}
	for _, skew := range []time.Duration{0, 30 * time.Second, -30 * time.Second, -61 * time.Second} {
		server := now.Add(skew)
		if got := ratelimit.Hold(200, h(server, server.Format(http.TimeFormat)), now, 1); got != 1200*time.Millisecond {
			t.Errorf("server clock %v from ours: Hold = %v, want 1.2s", skew, got)
		}
	}
	if got := ratelimit.Hold(200, h(now, ""), now, 1); got != 1200*time.Millisecond {
		t.Errorf("without Date: Hold = %v, want 1.2s", got)
	}
	if got := ratelimit.Hold(200, h(now.Add(30*time.Second), "yesterday"), now, 1); got != 1800*time.Millisecond {
		t.Errorf("with a malformed Date, the server 30 s ahead: Hold = %v, want 1.8s (our clock)", got)
	}
}

package httppolicy_test

import (
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
)

// lateBase answers at once with an event stream that sends a keepalive
// comment at once, its first event after first, and its end after rest
// more.
type lateBase struct{ first, rest time.Duration }

func (b lateBase) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	go func() {
		io.WriteString(pw, ": keepalive\n\n")
		time.Sleep(b.first)
		io.WriteString(pw, "data: {\"delta\":\"Hel\"}\n\n")
		time.Sleep(b.rest)
		io.WriteString(pw, "data: [DONE]\n\n")
		pw.Close()
	}()
	return &http.Response{StatusCode: 200, Request: req, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: pr}, nil
}

// Through the Transport, the breaker's slow rule times a stream to its
// first event (a keepalive does not count): a stream whose first event is
// late is slow the moment it passes SlowCallDuration, while the caller
// still reads; one whose first event comes at once is not, however long it
// then runs. So with or without a first-byte timeout (which reads ahead to
// the first event).
func TestSlowRuleTimesStreamsToTheirFirstEvent(t *testing.T) {
	for _, firstByte := range []time.Duration{0, time.Minute} {
		synctest.Test(t, func(t *testing.T) {
			br, err := breaker.New(breaker.Config{ConsecutiveFailures: 1 << 30, OpenTimeout: time.Hour,
				SlowCallRatio: 1, SlowCallDuration: time.Second, SlowCallMinCalls: 1, Window: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer br.Close()
			stream := func(first, rest time.Duration) {
				tr := &httppolicy.Transport{Base: lateBase{first, rest}, Policy: newPipeline(t, compose.Policies{Breaker: br}),
					FirstByteTimeout: firstByte}
				req, _ := http.NewRequest(http.MethodPost, "http://llm.test/v1/chat/completions", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadAll(resp.Body); err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			stream(10*time.Millisecond, time.Hour) // a long answer that started at once
			if c := br.Counts(); c.SlowCalls != 0 || br.State() != breaker.Closed {
				t.Fatalf("first byte timeout %v: counts %+v after a prompt stream; want no slow call", firstByte, c)
			}
			stream(2*time.Second, 0)
			if s := br.State(); s != breaker.Open {
				t.Fatalf("first byte timeout %v: state %v after a stream whose first event took 2s; want open", firstByte, s)
			}
		})
	}
}

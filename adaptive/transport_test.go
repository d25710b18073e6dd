package adaptive_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/retry"
)

// TestTransportMarksTheAnswer: through httppolicy's Transport, a streamed
// call counts as answered from its headers until its body ends.
func TestTransportMarksTheAnswer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first"))
		w.(http.Flusher).Flush()
		<-release
		w.Write([]byte(" last"))
	}))
	defer srv.Close()
	l := mustNew(t, adaptive.Config{})
	rt, err := retry.New(retry.Config{MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr := &httppolicy.Transport{Base: base, Policy: mustPipeline(t, compose.Policies{Bulkhead: l, Retry: rt})}
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if l.Answered() != 1 || l.Active() != 1 {
		t.Errorf("while the body streams: answered %d, active %d; want 1, 1", l.Answered(), l.Active())
	}
	close(release)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "first last" || l.Answered() != 0 || l.Active() != 0 {
		t.Errorf("after the body: %q, answered %d, active %d; want the body, 0, 0", body, l.Answered(), l.Active())
	}
}

package httppolicy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"

	"github.com/watertight/watertight/breaker"
)

type errorRecorder struct {
	mu   sync.Mutex
	errs []error
}

func (r *errorRecorder) Handle(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

// A user hook that panics while the policy finishes a call whose response
// was already handed over (here: the breaker opening because the stream
// broke) must not crash the process from the Transport's goroutine: the
// panic is reported to otel.Handle.
func TestHookPanicAfterHandOverIsReported(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // the stream breaks mid-way
		}
	}))
	defer srv.Close()
	rec := &errorRecorder{}
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(rec)
	defer otel.SetErrorHandler(prev)

	br, err := breaker.New(breaker.Config{Name: "up", ConsecutiveFailures: 1,
		OnStateChange: func(from, to breaker.State) { panic("hook") }})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	base := NewDependencyTransport(2)
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: &Transport{Base: base, Policy: br}}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, readErr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if readErr == nil {
		t.Fatal("the broken stream read without error")
	}
	if br.State() != breaker.Open {
		t.Errorf("breaker %v, want open after the broken stream", br.State())
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.errs) != 1 || !strings.Contains(rec.errs[0].Error(), "httppolicy: panic in a policy after the response was returned: hook") {
		t.Errorf("otel.Handle got %v", rec.errs)
	}
}

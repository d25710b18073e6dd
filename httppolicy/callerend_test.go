package httppolicy_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
)

// TestTransportCallersDeadlineNotCounted checks that requests ended by the
// caller's own deadline are not breaker failures, while a first-byte
// timeout of ours is: a breaker that trips on the first failure stays
// closed after three of the former and opens after one of the latter.
func TestTransportCallersDeadlineNotCounted(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	br := newBreaker(t, 1)
	pl, err := compose.New("dep", compose.Policies{Breaker: br})
	if err != nil {
		t.Fatal(err)
	}
	tr := &httppolicy.Transport{Policy: pl}
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the caller's DeadlineExceeded", err)
		}
	}
	if s, n := br.State(), br.Counts(); s != breaker.Closed || n.TotalFailures != 0 {
		t.Fatalf("breaker %v, counts %+v after three requests ended by the caller's deadline", s, n)
	}

	ours := &httppolicy.Transport{Policy: pl, FirstByteTimeout: 20 * time.Millisecond}
	defer ours.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	resp, err := (&http.Client{Transport: ours}).Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, httppolicy.ErrFirstByteTimeout) {
		t.Fatalf("err = %v, want ErrFirstByteTimeout", err)
	}
	if s := br.State(); s != breaker.Open {
		t.Errorf("breaker %v after a first-byte timeout, want open", s)
	}
}

package httppolicy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight/watertight/bulkhead"
)

type panicSignals struct{}

func (panicSignals) Observe(*http.Response) { panic("signals") }

// A Signals that panics hands its panic to RoundTrip's caller, and the
// response it was shown has its body closed on the way: no connection is
// left open.
func TestSignalsPanicClosesTheBody(t *testing.T) {
	var open atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	defer srv.Close()
	defer srv.CloseClientConnections() // before Close, which would wait for a leaked one
	base := NewDependencyTransport(4)
	bh, err := bulkhead.New(bulkhead.Config{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer bh.Close()
	client := &http.Client{Transport: &Transport{Base: base, Policy: bh, Signals: panicSignals{}}}
	for range 3 { // fewer than the 4 connections: a leak must not block a request
		func() {
			defer func() {
				if v := recover(); v != "signals" {
					t.Errorf("recovered %v; want the Signals panic", v)
				}
			}()
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
			client.Do(req)
		}()
	}
	base.CloseIdleConnections()
	// A connection whose body was closed went back to the pool and is now
	// closed; one left open would still be.
	for deadline := time.Now().Add(5 * time.Second); open.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := open.Load(); n > 0 {
		t.Errorf("%d connections still open after the panics; want 0", n)
	}
}

// Bytes read ahead while waiting for the first byte are not served after
// Close: a Read after Close fails, as net/http's own body's does.
func TestReadAfterCloseFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 100))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the body never ends
	}))
	defer srv.Close()
	defer srv.CloseClientConnections()
	base := NewDependencyTransport(2)
	defer base.CloseIdleConnections()
	bh, err := bulkhead.New(bulkhead.Config{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer bh.Close()
	client := &http.Client{Transport: &Transport{Base: base, Policy: bh, FirstByteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n, err := resp.Body.Read(make([]byte, 200)); n != 0 || !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Errorf("Read after Close = %d, %v; want 0, http.ErrBodyReadAfterClose", n, err)
	}
}

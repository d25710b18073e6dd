package watertight_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/retry"
)

// http.Client.CloseIdleConnections, promoted onto a Client, reaches the
// client's own pool.
func TestClientCloseIdleConnections(t *testing.T) {
	var closed atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := watertight.NewHTTPClient("api", watertight.Config{Bulkhead: &bulkhead.Config{Limit: 2}}, watertight.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	c.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for closed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if closed.Load() == 0 {
		t.Error("CloseIdleConnections closed no connection")
	}
}

// A user's own retry around a request and the reading of its body retries
// a timeout during the body as it retries one before the headers: the
// error the body's Read returns carries no live marker of httppolicy's.
func TestUserRetryAroundBodyTimeout(t *testing.T) {
	for _, stallBody := range []bool{false, true} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if stallBody {
				w.Write([]byte("partial"))
				w.(http.Flusher).Flush()
			}
			<-r.Context().Done()
		}))
		c, err := watertight.NewHTTPClient("api", watertight.Config{
			Deadline: &deadline.Config{Timeout: 20 * time.Millisecond},
		}, watertight.HTTPOptions{})
		if err != nil {
			t.Fatal(err)
		}
		user, err := retry.New(retry.Config{MaxAttempts: 3, InitialInterval: time.Millisecond, Jitter: retry.NoJitter})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		err = user.Execute(context.Background(), func(ctx context.Context) error {
			n++
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			resp, err := c.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, err = io.ReadAll(resp.Body)
			return err
		})
		if n != 3 || !errors.Is(err, deadline.ErrExceeded) || !errors.Is(err, retry.ErrExhausted) {
			t.Errorf("stall in the body %v: %d attempts, err %v; want 3 attempts, exhausted on the deadline", stallBody, n, err)
		}
		c.Close()
		srv.CloseClientConnections()
		srv.Close()
	}
}

// A zero deadline.Deadline in Use imposes no timeout, so any Attempt
// section fits under it.
func TestZeroDeadlineInUse(t *testing.T) {
	p, err := watertight.New("x", watertight.Config{
		Attempt: &deadline.Config{Timeout: time.Second},
		Use:     compose.Policies{Deadline: &deadline.Deadline{}},
	})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	p.Close()
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// upstreamHandler is the fake LLM provider: it answers every request after
// delay, or gives up when the request's context ends (the caller went away,
// or the server is closing), so that no handler outlives the server.
func upstreamHandler(delay time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
			w.Write([]byte("a slow answer\n"))
		case <-r.Context().Done():
		}
	})
}

// server is an http.Server serving on its own listener. It is not safe to
// Close concurrently.
type server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// listen starts serving h on addr ("127.0.0.1:0" picks a free port).
func listen(addr string, h http.Handler) (*server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("loginstorm: listen on %s: %w", addr, err)
	}
	s := &server{
		srv: &http.Server{
			Handler: h,
			// No ReadTimeout or WriteTimeout: a chat may legitimately take
			// two upstream delays in shared mode.
			ReadHeaderTimeout: 10 * time.Second,
		},
		ln:   ln,
		done: make(chan error, 1),
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// URL is the server's base URL, such as http://127.0.0.1:4001.
func (s *server) URL() string { return "http://" + s.ln.Addr().String() }

// Close closes the listener and every connection, cancelling the contexts
// of the requests still running, and waits for Serve to return.
func (s *server) Close() error {
	err := s.srv.Close()
	if serr := <-s.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// serveUntilDone serves h on addr until ctx is done, then shuts down,
// giving running requests a moment to finish before cutting them.
func serveUntilDone(ctx context.Context, addr string, h http.Handler) error {
	s, err := listen(addr, h)
	if err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.srv.Shutdown(sctx)
	return s.Close()
}

// delayFromEnv reads the DELAY environment variable: a Go duration ("30s",
// "1500ms") or a bare number of milliseconds, as the seed's DELAY_MS. It
// returns def if DELAY is unset.
func delayFromEnv(def time.Duration) (time.Duration, error) {
	v, ok := os.LookupEnv("DELAY")
	if !ok || v == "" {
		return def, nil
	}
	return parseDelay(v)
}

// parseDelay parses a Go duration or a bare number of milliseconds.
func parseDelay(v string) (time.Duration, error) {
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		v = strconv.FormatInt(ms, 10) + "ms"
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("loginstorm: DELAY %q is neither a duration nor milliseconds", v)
	}
	if d < 0 {
		return 0, fmt.Errorf("loginstorm: DELAY must be >= 0, got %v", d)
	}
	return d, nil
}

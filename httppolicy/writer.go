package httppolicy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
)

// responseWriter records whether the handler has written, and with which
// status, so that Handler neither writes twice nor misses a 5xx.
//
// It also gives the handler a header map of its own until the handler
// answers (its first WriteHeader with a final status, Write, ReadFrom,
// Flush or Hijack): a clone of the server's map as it was on entry, copied
// into the server's map as the handler answers. A handler that sets
// Set-Cookie or Content-Encoding and then runs past the deadline without
// answering thus leaves the server's map as it was, and the 504 Handler
// writes in its place goes out without those headers, while keeping what
// a middleware outside Handler set on entry (a gzip middleware's
// Content-Encoding, go.dev/issue/66343). Once the handler has answered,
// Header returns the server's map itself, as net/http's writer does, so
// trailers set after the first write (declared ones, or keys with
// http.TrailerPrefix) reach it.
type responseWriter struct {
	http.ResponseWriter
	header   http.Header // the handler's map; nil until it asks for one
	status   int
	wrote    bool
	hijacked bool
}

// Header returns the handler's own map until it has answered, and the
// server's map after.
func (w *responseWriter) Header() http.Header {
	if w.wrote {
		return w.ResponseWriter.Header()
	}
	if w.header == nil {
		// Cloned on first use rather than on entry: nobody else writes the
		// server's map while the handler runs, so it is still as it was on
		// entry, and a handler that never asks costs no clone.
		w.header = w.ResponseWriter.Header().Clone()
		if w.header == nil {
			w.header = make(http.Header)
		}
	}
	return w.header
}

func (w *responseWriter) WriteHeader(code int) {
	switch {
	case w.wrote:
		// A superfluous call: net/http reports it.
	case code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols:
		// Informational (103 Early Hints...): it goes out with the
		// handler's headers, but the handler has not answered yet, and
		// the server's map must stay as on entry for a 504 that may follow.
		w.withHandlerHeader(func() bool {
			w.ResponseWriter.WriteHeader(code)
			return false
		})
		return
	default:
		w.answered(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.answered(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// answered records the handler's answer and puts its headers in the
// server's map, before the server sends them.
func (w *responseWriter) answered(status int) {
	w.wrote = true
	w.status = status
	if w.header != nil {
		copyHeader(w.ResponseWriter.Header(), w.header)
	}
}

// withHandlerHeader calls send with the handler's headers in the server's
// map, for a write that sends them and may not count as the handler's
// answer: if send returns false, the server's map is put back as it was.
func (w *responseWriter) withHandlerHeader(send func() (keep bool)) {
	if w.header == nil {
		send() // the handler's map is the server's: nothing to swap
		return
	}
	server := w.ResponseWriter.Header()
	saved := server.Clone()
	copyHeader(server, w.header)
	// net/http writes the header before WriteHeader or Flush returns (the
	// HTTP/2 server waits for the frame to be written because the map
	// is not its own), so the map can be put back at once.
	if !send() {
		copyHeader(server, saved)
	}
}

// copyHeader makes dst hold exactly what src holds (the values are shared,
// not copied): a header the handler deleted from its map is deleted too.
func copyHeader(dst, src http.Header) {
	if dst == nil {
		return // a writer without a map: the handler had only its own
	}
	for k := range dst {
		if _, ok := src[k]; !ok {
			delete(dst, k)
		}
	}
	for k, v := range src {
		dst[k] = v
	}
}

// mergeTrailers runs once the handler has returned. It copies into the
// server's map the trailers the handler set, after its first write, in the
// map it had got from Header before that write (h := w.Header() at the top
// of a handler): net/http reads the trailers from the server's map once
// the handler returns. Only keys the server's map lacks are copied: a key
// it has was either copied at the first write or set since through Header,
// which returned the server's map by then.
func (w *responseWriter) mergeTrailers() {
	if !w.wrote || w.hijacked || w.header == nil {
		return
	}
	server := w.ResponseWriter.Header()
	if server == nil {
		return
	}
	for k, v := range w.header {
		if _, ok := server[k]; ok {
			continue
		}
		if strings.HasPrefix(k, http.TrailerPrefix) || declaredTrailer(server, k) {
			server[k] = v
		}
	}
}

// declaredTrailer reports whether the Trailer header of h names key.
func declaredTrailer(h http.Header, key string) bool {
	for _, v := range h["Trailer"] {
		for name := range strings.SplitSeq(v, ",") {
			if http.CanonicalHeaderKey(strings.TrimSpace(name)) == key {
				return true
			}
		}
	}
	return false
}

// Flush implements http.Flusher.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (w *responseWriter) FlushError() error {
	if w.wrote {
		return http.NewResponseController(w.ResponseWriter).Flush()
	}
	// A flush sends the header, the handler's: it is the handler's answer,
	// unless the writer cannot flush, and then nothing was sent.
	var err error
	w.withHandlerHeader(func() bool {
		err = http.NewResponseController(w.ResponseWriter).Flush()
		return !errors.Is(err, http.ErrNotSupported)
	})
	if !errors.Is(err, http.ErrNotSupported) {
		w.wrote = true // the handler's headers are in the server's map
		w.status = http.StatusOK
	}
	return err
}

// Hijack implements http.Hijacker; it fails with an error matching
// http.ErrNotSupported if the underlying writer cannot be hijacked.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		// The handler owns the connection and answers on it; Header now
		// returns the server's map, which should hold what it set.
		w.hijacked = true
		if !w.wrote {
			w.answered(0)
		}
	}
	return conn, rw, err
}

// ReadFrom keeps the underlying writer's io.ReaderFrom (sendfile) path.
func (w *responseWriter) ReadFrom(r io.Reader) (int64, error) {
	if !w.wrote {
		w.answered(http.StatusOK)
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, r)
}

// Unwrap lets http.ResponseController reach the server's writer (for
// SetReadDeadline, SetWriteDeadline, EnableFullDuplex; it finds Flush and
// Hijack here first). A handler that unwraps the writer itself and writes
// to the server's writer directly bypasses the handler's header map: the
// headers it set through this writer are not sent.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writerOnly hides ReadFrom so io.Copy does not loop back into it.
type writerOnly struct{ io.Writer }

var (
	_ http.Flusher  = (*responseWriter)(nil)
	_ http.Hijacker = (*responseWriter)(nil)
)

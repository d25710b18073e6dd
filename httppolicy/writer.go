package httppolicy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
)

// responseWriter records whether the handler has written, and with which
// status, so that Handler neither writes twice nor misses a 5xx.
type responseWriter struct {
	http.ResponseWriter
	status   int
	wrote    bool
	hijacked bool
}

func (w *responseWriter) WriteHeader(code int) {
	// 1xx other than 101 are informational: the real status comes later.
	if !w.wrote && (code < 100 || code > 199 || code == http.StatusSwitchingProtocols) {
		w.wrote = true
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	w.markWritten()
	return w.ResponseWriter.Write(b)
}

func (w *responseWriter) markWritten() {
	if !w.wrote {
		w.wrote = true
		w.status = http.StatusOK
	}
}

// Flush implements http.Flusher.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (w *responseWriter) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if !errors.Is(err, http.ErrNotSupported) {
		w.markWritten() // a flush sends the header
	}
	return err
}

// Hijack implements http.Hijacker; it fails with an error matching
// http.ErrNotSupported if the underlying writer cannot be hijacked.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
		w.wrote = true
	}
	return conn, rw, err
}

// ReadFrom keeps the underlying writer's io.ReaderFrom (sendfile) path.
func (w *responseWriter) ReadFrom(r io.Reader) (int64, error) {
	w.markWritten()
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, r)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writerOnly hides ReadFrom so io.Copy does not loop back into it.
type writerOnly struct{ io.Writer }

var (
	_ http.Flusher  = (*responseWriter)(nil)
	_ http.Hijacker = (*responseWriter)(nil)
)

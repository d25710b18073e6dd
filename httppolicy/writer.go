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
// status. Until the handler answers, it gives it a header map of its own:
// a clone of the server's map, copied into it as the handler answers.
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
		// Nobody else writes the server's map while the handler runs.
		w.header = w.ResponseWriter.Header().Clone()
		if w.header == nil {
			w.header = make(http.Header)
		}
	}
	return w.header
}

func (w *responseWriter) WriteHeader(code int) {
	if !w.wrote && code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// Informational: the server's map stays as on entry for a 504.
		w.withHandlerHeader(func() bool {
			w.ResponseWriter.WriteHeader(code)
			return false
		})
		return
	}
	w.answer(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	w.answer(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// answer records the handler's answer, unless it has answered, and puts
// its headers in the server's map before the server sends them.
func (w *responseWriter) answer(status int) {
	if w.wrote {
		return
	}
	w.wrote = true
	w.status = status
	if w.header != nil {
		copyHeader(w.ResponseWriter.Header(), w.header)
	}
}

// withHandlerHeader calls send with the handler's headers in the server's
// map. If send returns false, the server's map is put back as it was.
func (w *responseWriter) withHandlerHeader(send func() (keep bool)) {
	if w.header == nil {
		send() // the handler's map is the server's: nothing to swap
		return
	}
	server := w.ResponseWriter.Header()
	saved := server.Clone()
	copyHeader(server, w.header)
	// net/http has written the header when WriteHeader or Flush returns.
	if !send() {
		copyHeader(server, saved)
	}
}

// copyHeader makes dst hold exactly what src holds, values shared.
func copyHeader(dst, src http.Header) {
	if dst == nil {
		return
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

// mergeTrailers copies into the server's map, once the handler returned,
// the trailers it set in its own map after its first write. Keys the
// server's map has are newer.
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
	// A flush that works sends the handler's headers: its answer.
	var err error
	w.withHandlerHeader(func() bool {
		err = http.NewResponseController(w.ResponseWriter).Flush()
		return !errors.Is(err, http.ErrNotSupported)
	})
	if !errors.Is(err, http.ErrNotSupported) {
		w.answer(http.StatusOK)
	}
	return err
}

// Hijack implements http.Hijacker.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
		w.answer(0)
	}
	return conn, rw, err
}

// ReadFrom keeps the underlying writer's io.ReaderFrom (sendfile) path.
func (w *responseWriter) ReadFrom(r io.Reader) (int64, error) {
	w.answer(http.StatusOK)
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, r)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writerOnly hides ReadFrom so io.Copy does not loop back into it.
type writerOnly struct{ io.Writer }

package httppolicy

import (
	"errors"
	"net/http"
	"syscall"
)

// idempotent reports whether req may be sent twice with the effect of once:
// its method is idempotent (RFC 9110, section 9.2.2), or it carries an
// Idempotency-Key or X-Idempotency-Key header, as net/http itself treats it.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace,
		http.MethodPut, http.MethodDelete:
		return true
	}
	if _, ok := req.Header["Idempotency-Key"]; ok {
		return true
	}
	_, ok := req.Header["X-Idempotency-Key"]
	return ok
}

// unprocessedStatus reports whether a response with status code says
// plainly that the server did not act on the request, so that even a
// non-idempotent one may be sent again.
func unprocessedStatus(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable
}

// unprocessedError reports whether a transport error says plainly that the
// request never reached the server.
func unprocessedError(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

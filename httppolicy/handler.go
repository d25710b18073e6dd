package httppolicy

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

var errHandlerRan = errors.New("httppolicy: the handler has already run: a policy called fn twice")

// HandlerConfig configures [Handler] and [Middleware]. Its zero value is
// valid: rejections are answered 503 with "Retry-After: 1". It is read once,
// when the handler is built.
type HandlerConfig struct {
	// RetryAfter is the wait sent in the Retry-After header of the 503 that
	// answers a rejection, rounded up to whole seconds. Zero or negative
	// means 1s.
	RetryAfter time.Duration

	// OnReject, if set, answers a rejected request in place of the 503:
	// w is the server's own ResponseWriter, r the request, and err the
	// rejection (errors.Is policy.ErrRejected). It runs on the request's
	// goroutine after the policy has returned, and may be called
	// concurrently.
	OnReject func(w http.ResponseWriter, r *http.Request, err error)
}

// Handler returns an http.Handler that runs h through p, one Execute per
// request, with the request's context replaced by the one Execute gives.
// The outcomes:
//
//	outcome                                       response
//	h ran                                         what h wrote
//	h wrote a 5xx status                          what h wrote; a failure for p (a breaker counts it)
//	rejected (errors.Is policy.ErrRejected)       503 with Retry-After, or Config.OnReject
//	deadline.ErrExceeded and h wrote nothing      504 Gateway Timeout
//	p failed otherwise before h ran               503 (for example, ctx canceled in a bulkhead queue)
//
// h runs at most once per request: a retry policy in p never runs it again
// (its failures are marked with retry.Permanent). The ResponseWriter h gets
// keeps http.Flusher, http.Hijacker and [http.ResponseController] working
// (it has an Unwrap method). A panic in h propagates to net/http once p has
// freed what it held.
//
// Until h answers (its first WriteHeader with a final status, Write,
// ReadFrom, Flush or Hijack), the headers it sets go into a map of its own,
// a copy of the response's headers as they were when Handler was called;
// they are copied into the response's headers as h answers, and an
// informational (1xx) status goes out with them. So the 503 and 504 that
// Handler writes itself go out over the headers as they were on entry: a
// header a middleware outside Handler set (a gzip middleware's
// Content-Encoding) is kept, while the Set-Cookie, Cache-Control or
// Content-Encoding of an h that ran past the deadline without answering
// are not sent. Once h has answered, Header returns the response's own
// map, so trailers work as net/http documents them; trailers h sets after
// answering in the map it got before are copied when it returns. A handler
// that unwraps the writer and writes to the server's own writer bypasses
// its map: the headers it set through Header are not sent.
//
// It panics if p or h is nil. The handler is safe for concurrent use if p
// and h are.
func Handler(p policy.Policy, h http.Handler, cfg HandlerConfig) http.Handler {
	if p == nil {
		panic("httppolicy: nil Policy")
	}
	if h == nil {
		panic("httppolicy: nil Handler")
	}
	return &handler{p: p, h: h, retryAfter: retryAfterHeader(cfg.RetryAfter), onReject: cfg.OnReject}
}

// Middleware returns a function that wraps an http.Handler with [Handler].
// It panics if p is nil; the function it returns panics if given a nil
// handler, and is safe for concurrent use.
func Middleware(p policy.Policy, cfg HandlerConfig) func(http.Handler) http.Handler {
	if p == nil {
		panic("httppolicy: nil Policy")
	}
	return func(h http.Handler) http.Handler { return Handler(p, h, cfg) }
}

// retryAfterHeader renders d as delta-seconds, rounded up, at least 1.
func retryAfterHeader(d time.Duration) string {
	if d <= 0 {
		return "1"
	}
	secs := int64(d / time.Second)
	if d%time.Second != 0 {
		secs++
	}
	return strconv.FormatInt(secs, 10)
}

type handler struct {
	p          policy.Policy
	h          http.Handler
	retryAfter string
	onReject   func(w http.ResponseWriter, r *http.Request, err error)
}

func (s *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := &serverCall{h: s.h, r: r, rw: responseWriter{ResponseWriter: w}}
	err := s.p.Execute(r.Context(), c.run)
	if err == nil || c.rw.wrote {
		return
	}
	switch {
	case !c.ran && errors.Is(err, policy.ErrRejected):
		if s.onReject != nil {
			s.onReject(w, r, err)
			return
		}
		w.Header().Set("Retry-After", s.retryAfter)
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
	case errors.Is(err, deadline.ErrExceeded):
		http.Error(w, http.StatusText(http.StatusGatewayTimeout), http.StatusGatewayTimeout)
	case !c.ran:
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
	}
}

// serverCall is one request through a Handler.
type serverCall struct {
	h   http.Handler
	r   *http.Request
	rw  responseWriter
	ran bool
}

// run is the policy.Func: it runs the handler once and reports a 5xx
// status, or the end of ctx, as the call's failure.
func (c *serverCall) run(ctx context.Context) error {
	if c.ran {
		return retry.Permanent(errHandlerRan)
	}
	c.ran = true
	c.h.ServeHTTP(&c.rw, c.r.WithContext(ctx))
	c.rw.mergeTrailers()
	if c.rw.status >= 500 {
		return retry.Permanent(&StatusError{StatusCode: c.rw.status})
	}
	if err := ctx.Err(); err != nil {
		// The handler returned because its context ended, perhaps
		// without writing: report it, so that a deadline answers 504
		// over the headers as they were on entry.
		return retry.Permanent(err)
	}
	if !c.rw.wrote && !c.rw.hijacked {
		// It returned in time without writing: an implicit 200 with an
		// empty body (a CORS preflight, a HEAD), which net/http sends
		// once ServeHTTP returns, with the server's map: the handler's
		// headers go there now.
		c.rw.answered(http.StatusOK)
	}
	return nil
}

package httppolicy

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/watertight/watertight/policy"
)

var errHandlerRan = errors.New("httppolicy: the handler has already run: a policy called fn twice")

// HandlerConfig configures [Handler] and [Middleware]. Its zero value is
// valid: each field says its default.
type HandlerConfig struct {
	// RetryAfter is the Retry-After of the 503 that answers a rejection,
	// rounded up to whole seconds. Zero or negative means 1s.
	RetryAfter time.Duration

	// OnReject, if set, answers a rejected request in place of the 503.
	// It may be called concurrently.
	OnReject func(w http.ResponseWriter, r *http.Request, err error)

	// Priority gives a request's priority (policy.Priority) from its
	// route, method or authenticated caller. The policy and the handler
	// see it in the context. Nil: a request keeps the priority its context
	// carries (policy.PriorityDefault if none), unless TrustPriority
	// applies. A value that is none of the three priorities counts as the
	// default. It may be called concurrently.
	Priority func(r *http.Request) policy.Priority

	// TrustPriority reports whether the client of a request may set its
	// own priority, in the [PriorityHeader]. When it returns true and the
	// header holds one known priority, that priority wins over Priority's.
	// Nil trusts no client: a client cannot raise its own priority. It may
	// be called concurrently.
	TrustPriority func(r *http.Request) bool

	// Key gives a request's key (policy.WithKey: whom the request is made
	// for): an authenticated tenant, taken from what the request proved
	// (a verified token, a client certificate), not from a header the
	// client merely sends unless the client is trusted. The policy and the
	// handler see it in the context; a keyed.Group, or a bulkhead with a
	// fair share, reads it. Nil, or an empty key: a request keeps the key
	// its context carries. It may be called concurrently.
	Key func(r *http.Request) string
}

// Handler returns an http.Handler that runs h through p, one Execute per
// request, with the request's context replaced by the one Execute gives.
// The outcomes:
//
//	outcome                                       response
//	h ran                                         what h wrote
//	h wrote a 5xx status                          what h wrote; a failure for p (a breaker counts it)
//	rejected (errors.Is policy.ErrRejected)       503 with Retry-After, or Config.OnReject
//	  (a queued request shed for a higher priority is one)
//	policy.ErrTimeout and h wrote nothing         504 Gateway Timeout
//	p failed otherwise before h ran               503 (for example, ctx canceled in a bulkhead queue)
//
// h runs at most once per request: its failures are marked with
// policy.Permanent. The ResponseWriter h gets keeps http.Flusher,
// http.Hijacker and [http.ResponseController] working. A panic in h goes
// on to net/http once p has freed what it held.
//
// Until h answers (a final WriteHeader, Write, ReadFrom, Flush or
// Hijack), its headers go into a map of its own, copied into the
// response's as it answers. So a 503 or 504 written in its place goes out
// with the headers as they were on entry. Once h has answered, Header
// returns the response's own map, and trailers work as net/http documents
// them. Headers set through Header do not reach a writer h unwrapped.
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
	return &handler{p: p, h: h, cfg: cfg, retryAfter: retryAfterHeader(cfg.RetryAfter)}
}

// Middleware returns a function that wraps a handler with [Handler]. It
// panics if p is nil. The function panics if given a nil handler.
func Middleware(p policy.Policy, cfg HandlerConfig) func(http.Handler) http.Handler {
	if p == nil {
		panic("httppolicy: nil Policy")
	}
	return func(h http.Handler) http.Handler { return Handler(p, h, cfg) }
}

// retryAfterHeader renders d as delta-seconds, rounded up, at least 1.
func retryAfterHeader(d time.Duration) string {
	secs := int64(d / time.Second)
	if d%time.Second != 0 {
		secs++
	}
	return strconv.FormatInt(max(secs, 1), 10)
}

type handler struct {
	p          policy.Policy
	h          http.Handler
	cfg        HandlerConfig
	retryAfter string
}

func (s *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := &serverCall{h: s.h, r: r, rw: responseWriter{ResponseWriter: w}}
	ctx := r.Context()
	if p, ok := s.priorityOf(r); ok {
		ctx = policy.WithPriority(ctx, p)
	}
	if s.cfg.Key != nil {
		if k := s.cfg.Key(r); k != "" {
			ctx = policy.WithKey(ctx, k)
		}
	}
	err := s.p.Execute(ctx, c.run)
	if err == nil || c.rw.wrote {
		return
	}
	switch {
	case !c.ran && errors.Is(err, policy.ErrRejected):
		if s.cfg.OnReject != nil {
			s.cfg.OnReject(w, r, err)
			return
		}
		w.Header().Set("Retry-After", s.retryAfter)
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
	case errors.Is(err, policy.ErrTimeout):
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

// run is the policy.Func: it runs the handler once. A 5xx status or the
// end of ctx is the call's failure.
func (c *serverCall) run(ctx context.Context) error {
	if c.ran {
		return policy.Permanent(errHandlerRan)
	}
	c.ran = true
	c.h.ServeHTTP(&c.rw, c.r.WithContext(ctx))
	c.rw.mergeTrailers()
	if c.rw.status >= 500 {
		return policy.Permanent(&StatusError{StatusCode: c.rw.status})
	}
	if err := ctx.Err(); err != nil {
		// So that a deadline answers 504 if the handler wrote nothing.
		return policy.Permanent(err)
	}
	c.rw.answer(http.StatusOK) // net/http sends an implicit 200 with the server's map
	return nil
}

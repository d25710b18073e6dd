package httppolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/watertight/watertight/retry"
)

var _ http.RoundTripper = (*Hedging)(nil)

var (
	errNilHedge        = errors.New("httppolicy: Hedging.Hedge is nil")
	errAttemptPanicked = errors.New("httppolicy: a hedged attempt panicked")
)

// Hedging is an [http.RoundTripper] that hedges the requests that are safe
// to send twice at once: when Base has not answered after the Hedge's
// delay, it sends the request again beside the first, up to MaxHedges more
// times, and returns the first response that is not a failure. Base is
// usually a [*Transport], so that each attempt is a whole call of its
// pipeline, with its own bulkhead slot, breaker verdict, retries and
// stream timeouts.
//
// It hedges a request only if its method is idempotent by RFC 9110 (GET,
// HEAD, OPTIONS, TRACE, PUT, DELETE) and its body, if any, can be sent
// again (Request.GetBody). Any other request goes to Base once, as is: a
// POST is never sent twice, even with an Idempotency-Key, since two copies
// in flight at once may both run, or the second be refused (409).
//
// Set the fields before the first request and do not change them
// afterwards; a Hedging is then safe for concurrent use by multiple
// goroutines. The zero value has no Hedge: its RoundTrip returns an error.
type Hedging struct {
	// Base sends each attempt. Nil means [http.DefaultTransport].
	Base http.RoundTripper

	// Hedge decides when to send another attempt, and how many. It is
	// required.
	Hedge *retry.Hedge

	// IsFailure reports whether a response is a failure, which starts the
	// next attempt at once, as a transport error does. Nil means
	// [DefaultIsFailure]. Give it the Transport's IsFailure. It may be
	// called concurrently and must not read or close the body.
	IsFailure func(*http.Response) bool
}

// RoundTrip sends req through Base, hedged as the Hedging documentation
// says, and returns one response: the first that is not a failure, or, if
// every attempt failed with a failure response, the last one (as a
// Transport returns it), or the call's error. It closes the bodies of the
// responses it does not return, a late one included. The response's body
// holds its attempt's context until it is read to EOF or closed: close
// it, as net/http requires. A Hedge error comes unchanged: its
// [retry.ExhaustedError] names the last failure.
//
// A panic in an attempt (a Signals, a base) before the call has its
// outcome is raised on the caller's goroutine, the other attempts
// canceled and their responses closed. One in an attempt that lost, after
// the call has its outcome, is reported to otel.Handle with its stack,
// and the program goes on: the caller has its response. RoundTrip closes
// req.Body, even on error, and does not modify req.
func (h *Hedging) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, errNilReq
	}
	if h.Hedge == nil {
		closeReqBody(req)
		return nil, errNilHedge
	}
	base := h.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if !hedgeable(req) {
		return base.RoundTrip(req)
	}
	c := &hedgedCall{base: base, req: req, isFailure: h.IsFailure}
	if c.isFailure == nil {
		c.isFailure = DefaultIsFailure
	}
	c.hasBody = req.Body != nil && req.Body != http.NoBody
	// An attempt's runtime.Goexit ends this goroutine inside Hedged: the
	// responses got are released all the same.
	defer c.abandon()
	resp, err := retry.Hedged(req.Context(), h.Hedge, nil, c.attempt)
	return c.finish(req.Context(), resp, err)
}

// CloseIdleConnections closes the idle connections of Base (of
// http.DefaultTransport if Base is nil), if it has such a method.
func (h *Hedging) CloseIdleConnections() {
	base := h.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if c, ok := base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// hedgeable reports whether req may be sent twice at once: an idempotent
// method (an Idempotency-Key does not count) and a body that can be sent
// again.
func hedgeable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace,
		http.MethodPut, http.MethodDelete:
	default:
		return false
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// hedgedCall is one hedged RoundTrip. Its attempts run concurrently; what
// they share is under mu.
type hedgedCall struct {
	base      http.RoundTripper
	req       *http.Request
	isFailure func(*http.Response) bool
	hasBody   bool

	mu        sync.Mutex
	done      bool            // the call has its outcome: a response got now is closed at once
	got       []*attemptReply // the responses got before done
	panicking bool            // an attempt panicked before done
	pval      any             // its panic
	stack     []byte          // and its stack
}

// attemptReply is a response an attempt got, with the context that its
// body still needs.
type attemptReply struct {
	resp   *http.Response
	cancel context.CancelCauseFunc // the request's context
	stop   func() bool             // the watch of the attempt's context
}

// release frees what r holds: its body, then its context.
func (r *attemptReply) release() {
	if r.resp.Body != nil {
		r.resp.Body.Close()
	}
	r.end()
}

// end frees r's context.
func (r *attemptReply) end() {
	r.stop()
	r.cancel(nil)
}

// attempt sends one copy of the request. A panic in it (a Signals, a
// base) goes to the caller if the call has no outcome yet; else it is
// reported to otel.Handle, with its stack, since the caller has its
// response and nobody could recover it.
func (c *hedgedCall) attempt(actx context.Context) (resp *http.Response, err error) {
	normal := false
	defer func() {
		if normal {
			return
		}
		// recover returns nil only for runtime.Goexit, which retry.Hedged
		// carries itself.
		if v := recover(); v != nil {
			resp, err = nil, c.panicked(v)
		}
	}()
	resp, err = c.send(actx)
	normal = true
	return resp, err
}

// panicked keeps v, an attempt's panic, with its stack, for finish, and
// returns the error that ends the call; or, if the call has its outcome,
// reports v and returns a loser's error.
func (c *hedgedCall) panicked(v any) error {
	stack := debug.Stack()
	c.mu.Lock()
	if !c.done && !c.panicking {
		c.panicking, c.pval, c.stack = true, v, stack
		c.mu.Unlock()
		return retry.Permanent(errAttemptPanicked)
	}
	c.mu.Unlock()
	reportLoserPanic(v, stack)
	return retry.ErrHedgeLost
}

// reportLoserPanic reports v, the panic of an attempt that lost, with
// the stack of the goroutine that panicked: it is not raised, so nothing
// else shows where it came from.
func reportLoserPanic(v any, stack []byte) {
	otel.Handle(fmt.Errorf("httppolicy: panic in a hedged attempt that lost: %v\n\n%s", v, stack))
}

// send sends one copy of the request. Its context, actx, ends when the
// call does; the request's own context, a child of the caller's, ends
// with it only if the attempt lost (the cause retry.ErrHedgeLost), since
// the winner's body is read after the call has returned.
func (c *hedgedCall) send(actx context.Context) (*http.Response, error) {
	rctx, cancel := context.WithCancelCause(c.req.Context())
	stop := context.AfterFunc(actx, func() {
		if errors.Is(context.Cause(actx), retry.ErrHedgeLost) {
			cancel(retry.ErrHedgeLost)
		}
	})
	var resp *http.Response
	kept := false
	defer func() {
		if kept {
			return
		}
		// Not the call's (or IsFailure panicked): nobody else holds it.
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		stop()
		cancel(nil)
	}()
	r := c.req.WithContext(rctx)
	if c.hasBody && retry.Attempt(actx) > 1 {
		// req.Body is the first attempt's (its base closes it).
		body, err := c.req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("httppolicy: GetBody: %w", err)
		}
		r.Body = body
	}
	resp, err := c.base.RoundTrip(r)
	if resp == nil || err != nil {
		if err == nil {
			err = fmt.Errorf("httppolicy: Hedging.Base (%T) returned a nil *http.Response with a nil error", c.base)
		}
		return nil, err
	}
	failed := c.isFailure(resp)
	if failed {
		// Read while the attempt holds resp alone.
		bufferBody(resp)
	}
	if !c.keep(&attemptReply{resp: resp, cancel: cancel, stop: stop}) {
		return nil, retry.ErrHedgeLost
	}
	kept = true
	if failed {
		return nil, newStatusError(resp)
	}
	return resp, nil
}

// keep records r as a response of the call, unless the call has its
// outcome already, and reports whether it did.
func (c *hedgedCall) keep(r *attemptReply) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return false
	}
	c.got = append(c.got, r)
	return true
}

// abandon releases the responses got, if finish did not run.
func (c *hedgedCall) abandon() {
	c.mu.Lock()
	got := c.got
	c.got, c.done = nil, true
	c.mu.Unlock()
	for _, r := range got {
		r.release()
	}
}

// finish ends the call, which retry.Hedged ended with resp and err: it
// picks the response to return (the winner's, or the failure response the
// error names), releases every other response got, and hands the chosen
// one's context over to its body.
func (c *hedgedCall) finish(ctx context.Context, resp *http.Response, err error) (*http.Response, error) {
	c.mu.Lock()
	c.done = true
	got := c.got
	c.got = nil
	panicking, pval, stack := c.panicking, c.pval, c.stack
	c.mu.Unlock()
	switch {
	case panicking && err == nil:
		// Another attempt won before the panic reached the hedge.
		reportLoserPanic(pval, stack)
	case panicking:
		for _, r := range got {
			r.release()
		}
		panic(pval)
	}
	if err != nil {
		resp = nil
		if se, ok := errors.AsType[*StatusError](err); ok && ctx.Err() == nil {
			resp = se.Response
		}
	}
	var chosen *attemptReply
	for _, r := range got {
		if resp != nil && r.resp == resp {
			chosen = r
			continue
		}
		r.release()
	}
	if chosen == nil {
		if err == nil {
			err = errNoRun // unreachable: the winner's response is in got
		}
		return nil, err
	}
	holdContext(chosen)
	return resp, nil
}

// holdContext keeps the context of r's request until its body ends (EOF,
// a read error, Close): at once if it has none.
func holdContext(r *attemptReply) {
	b := r.resp.Body
	if b == nil || b == http.NoBody {
		r.end()
		return
	}
	hb := &heldBody{ReadCloser: b, r: r}
	if w, ok := b.(io.Writer); ok {
		// 101 Switching Protocols: the connection, in both directions.
		r.resp.Body = &heldRWBody{heldBody: hb, w: w}
		return
	}
	r.resp.Body = hb
}

// heldBody is the body of a hedged call's response: its end frees the
// attempt's context.
type heldBody struct {
	io.ReadCloser
	r     *attemptReply
	ended atomic.Bool
}

func (b *heldBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.end()
	}
	return n, err
}

func (b *heldBody) Close() error {
	err := b.ReadCloser.Close()
	b.end()
	return err
}

func (b *heldBody) end() {
	if b.ended.CompareAndSwap(false, true) {
		b.r.end()
	}
}

// heldRWBody is a heldBody that net/http made writable.
type heldRWBody struct {
	*heldBody
	w io.Writer
}

func (b *heldRWBody) Write(p []byte) (int, error) { return b.w.Write(p) }

// newStatusError returns the StatusError of a failure response.
func newStatusError(resp *http.Response) *StatusError {
	se := &StatusError{Response: resp, StatusCode: resp.StatusCode}
	if d, ok := ParseRetryAfter(resp.Header, time.Now()); ok {
		se.RetryAfterDelay = d
	}
	return se
}

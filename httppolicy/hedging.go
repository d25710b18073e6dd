package httppolicy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/watertight/watertight/hedge"
)

var errNilHedge = errors.New("httppolicy: Hedging.Hedge is nil")

// Hedging is an [http.RoundTripper] that hedges requests: when Base has
// not answered after the Hedge's delay, it sends the request again beside
// the first, up to MaxHedges more times. Base is usually a [*Transport].
//
// It hedges only requests with a method idempotent by RFC 9110 (GET,
// HEAD, OPTIONS, TRACE, PUT, DELETE) and a body, if any, that GetBody
// can replay. Any other request goes to Base once: a POST is never sent
// twice, even with an Idempotency-Key.
//
// Set the fields before the first request and do not change them later.
// A Hedging is then safe for concurrent use. The zero value has no Hedge:
// its RoundTrip returns an error.
type Hedging struct {
	// Base sends each attempt. Nil means [http.DefaultTransport].
	Base http.RoundTripper
	// Hedge decides when to send another attempt. It is required.
	Hedge *hedge.Hedge
	// IsFailure reports whether a response is a failure. Nil means
	// [DefaultIsFailure]. It may be called concurrently and must not read
	// or close the body.
	IsFailure func(*http.Response) bool
}

// RoundTrip sends req through Base, hedged, and returns the first
// response that is not a failure. The others are canceled with the cause
// hedge.ErrLost, and their bodies closed. If every attempt failed with a
// failure response, it returns the last; else the Hedge's error. A spent
// quota (see [DefaultIsFailure]) ends the call at once, whatever
// IsFailure says: it is returned, and no hedge starts after it. A panic
// in an attempt crashes the program, as package hedge says. RoundTrip
// closes req.Body, even on error, and does not modify req.
func (h *Hedging) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, errNilReq
	}
	if h.Hedge == nil {
		closeReqBody(req)
		return nil, errNilHedge
	}
	base := cmp.Or(h.Base, http.DefaultTransport)
	hasBody := req.Body != nil && req.Body != http.NoBody
	if !idempotentMethod(req.Method) || hasBody && req.GetBody == nil {
		return base.RoundTrip(req)
	}
	c := &hedgedCall{base: base, req: req, isFailure: h.IsFailure, hasBody: hasBody}
	if c.isFailure == nil {
		c.isFailure = DefaultIsFailure
	}
	// A panic in a hook of the Hedge's leaves no response unclosed.
	defer c.abandon()
	resp, err := hedge.Do(req.Context(), h.Hedge, nil, c.attempt)
	return c.finish(req.Context(), resp, err)
}

// CloseIdleConnections closes the idle connections of Base, if it has
// such a method.
func (h *Hedging) CloseIdleConnections() { closeIdle(h.Base) }

// hedgedCall is one hedged RoundTrip.
type hedgedCall struct {
	base      http.RoundTripper
	req       *http.Request
	isFailure func(*http.Response) bool
	hasBody   bool

	mu   sync.Mutex
	done bool            // the call has its outcome
	got  []*attemptReply // the responses got before done
}

// attemptReply is a response an attempt got, with its request's context.
type attemptReply struct {
	resp   *http.Response
	cancel context.CancelCauseFunc
	stop   func() bool // the watch of the attempt's context
}

func (r *attemptReply) release() {
	closeResp(r.resp)
	r.end()
}

func (r *attemptReply) end() {
	r.stop()
	r.cancel(nil)
}

// attempt sends one copy of the request. Its request's context ends with
// actx only if the attempt lost: the winner's body is read later.
func (c *hedgedCall) attempt(actx context.Context) (_ *http.Response, err error) {
	rctx, cancel := context.WithCancelCause(c.req.Context())
	stop := context.AfterFunc(actx, func() {
		if errors.Is(context.Cause(actx), hedge.ErrLost) {
			cancel(hedge.ErrLost)
		}
	})
	reply := &attemptReply{cancel: cancel, stop: stop}
	kept := false
	defer func() {
		if !kept {
			reply.release()
		}
	}()
	r := c.req.WithContext(rctx)
	if c.hasBody && hedge.Attempt(actx) > 1 {
		body, err := c.req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("httppolicy: GetBody: %w", err)
		}
		r.Body = body
	}
	resp, err := c.base.RoundTrip(r)
	reply.resp = resp
	if resp == nil || err != nil {
		if err == nil {
			err = fmt.Errorf("httppolicy: Hedging.Base (%T) returned a nil *http.Response with a nil error", c.base)
		}
		return nil, err
	}
	spent := false
	if mayBeSpent(resp.StatusCode) {
		bufferBody(resp) // while the attempt holds resp alone
		spent = quotaSpent(resp)
	}
	failed := !spent && c.isFailure(resp)
	if failed {
		bufferBody(resp)
	}
	if !c.keep(reply) {
		return nil, hedge.ErrLost
	}
	kept = true
	switch {
	case spent: // no hedge after it
		return nil, spentError(resp)
	case failed:
		return nil, newStatusError(resp)
	}
	return resp, nil
}

// keep records r unless the call has its outcome.
func (c *hedgedCall) keep(r *attemptReply) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		c.got = append(c.got, r)
	}
	return !c.done
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

// finish picks the response to return, releases the others, and hands
// the chosen one's context over to its body.
func (c *hedgedCall) finish(ctx context.Context, resp *http.Response, err error) (*http.Response, error) {
	c.mu.Lock()
	c.done = true
	got := c.got
	c.got = nil
	c.mu.Unlock()
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
		} else {
			r.release()
		}
	}
	if chosen == nil {
		return nil, cmp.Or(err, errNoRun)
	}
	if b := resp.Body; b == nil || b == http.NoBody {
		chosen.end()
	} else {
		resp.Body = keepWriter(b, &heldBody{ReadCloser: b, r: chosen})
	}
	return resp, nil
}

// heldBody is the body of a hedged call's response: its end frees its
// request's context.
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

// keepWriter returns rc, writable as orig if orig is: net/http makes the
// body of a 101 Switching Protocols response an io.ReadWriteCloser.
func keepWriter(orig, rc io.ReadCloser) io.ReadCloser {
	if w, ok := orig.(io.Writer); ok {
		return rwBody{rc, w}
	}
	return rc
}

type rwBody struct {
	io.ReadCloser
	io.Writer
}

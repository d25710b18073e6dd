package httppolicy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"syscall"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/route"
)

// attempt is the policy.Func: it sends the request once.
func (x *exchange) attempt(ctx context.Context) (err error) {
	if err := x.enter(ctx); err != nil {
		return err
	}
	defer x.mu.Unlock()
	switch {
	case x.accepted != nil || x.stream != nil:
		return policy.Permanent(errDone)
	case x.stopped:
		// The policy ignored an earlier attempt's Permanent marker.
		return policy.Permanent(errStopped)
	}
	closeResp(x.last)
	x.last = nil
	rctx, w := ctx, (*streamWatch)(nil)
	if x.timeouts.firstByte > 0 || x.timeouts.idle > 0 {
		w = newStreamWatch(x.t, ctx, x.timeouts)
		rctx = w.ctx
		defer func() {
			if err != compose.ErrHandOver {
				w.end() // else the held call's end ends it
			}
		}()
	}
	r, err := x.request(rctx)
	if err != nil {
		return err
	}
	resp, err := x.base.RoundTrip(r)
	if resp == nil || err != nil {
		return x.noResponse(w, r, resp, err)
	}
	stage.Answered(ctx)
	if mayBeSpent(resp.StatusCode) {
		if err := x.keep(w, resp); err != nil {
			return err
		}
		if quotaSpent(resp) {
			return x.spent(ctx, resp)
		}
	}
	if x.judge(resp) {
		return x.failureStatus(ctx, w, resp)
	}
	return x.accept(ctx, w, resp)
}

// request returns the request an attempt sends. Attempts after the first
// send a body from GetBody.
func (x *exchange) request(ctx context.Context) (*http.Request, error) {
	r := x.req.WithContext(ctx)
	if x.t.PropagatePriority {
		withPriority(r)
	}
	if !x.hasBody || !x.bodySent {
		x.bodySent = x.hasBody
		return r, nil
	}
	if x.req.GetBody == nil {
		return nil, policy.Permanent(errors.New("httppolicy: request body already sent and GetBody is nil"))
	}
	body, err := x.req.GetBody()
	if err != nil {
		return nil, policy.Permanent(fmt.Errorf("httppolicy: GetBody: %w", err))
	}
	r.Body = body
	return r, nil
}

// noResponse ends an attempt whose base returned resp and err with one of
// them nil.
func (x *exchange) noResponse(w *streamWatch, r *http.Request, resp *http.Response, err error) error {
	if resp == nil && err == nil {
		// A broken base: not retried, and its body closed in its place.
		closeReqBody(r)
		x.stopped = true
		return policy.Permanent(fmt.Errorf("httppolicy: Transport.Base (%T) returned a nil *http.Response with a nil error", x.base))
	}
	closeResp(resp)
	err = w.timedOut(err) // net/http's error says only that the request was canceled
	return x.failed(err, errors.Is(err, syscall.ECONNREFUSED))
}

// judge tells Signals of resp and reports whether resp is a failure. A
// panic closes resp's body on its way out.
func (x *exchange) judge(resp *http.Response) bool {
	ok := false
	defer func() {
		if !ok {
			closeResp(resp)
		}
	}()
	if x.t.Signals != nil {
		x.t.Signals.Observe(resp)
	}
	failure := x.isFailure(resp)
	ok = true
	return failure
}

// keep reads the first MaxFailureBody bytes of resp's body into memory,
// while the attempt's context is live, unless they are.
func (x *exchange) keep(w *streamWatch, resp *http.Response) error {
	if _, ok := resp.Body.(memBody); ok {
		return nil
	}
	if w != nil && resp.Body != nil {
		resp.Body = &firstByteBody{ReadCloser: resp.Body, w: w}
	}
	bufferBody(resp)
	if !w.firstByteIn() {
		resp.Body.Close()
		return x.failed(w.cause(), false)
	}
	return nil
}

// failureStatus ends an attempt whose response is a failure. Its body,
// in memory, may give the usage the attempt is settled at.
func (x *exchange) failureStatus(ctx context.Context, w *streamWatch, resp *http.Response) error {
	if err := x.keep(w, resp); err != nil {
		return err
	}
	if mb, ok := resp.Body.(memBody); ok {
		readMemUsage(ctx, resp.Header, mb)
	}
	x.last = resp
	return x.failed(newStatusError(resp), unprocessedStatus(resp.StatusCode))
}

// spent ends the call with resp, a spent quota: the caller gets it, with
// X-Should-Retry: false, which the OpenAI and Anthropic SDKs read as "do
// not retry".
func (x *exchange) spent(ctx context.Context, resp *http.Response) error {
	x.last = resp
	// Only a Route may send it on: to another endpoint, with a quota of
	// its own.
	_, routed := route.EndpointOf(ctx)
	x.stopped = !routed
	return policy.Permanent(spentError(resp))
}

// accept takes resp, a response that is not a failure. It is handed
// over unless its body is in memory: the call is then held until the body
// ends, or the attempt's context.
func (x *exchange) accept(ctx context.Context, w *streamWatch, resp *http.Response) error {
	noBody := resp.Body == nil || resp.Body == http.NoBody
	var prefix []byte
	switch {
	case noBody || resp.StatusCode == http.StatusSwitchingProtocols:
		// A switched connection's first byte may be the caller's to send.
		if !w.firstByteIn() {
			closeResp(resp)
			return x.failed(w.cause(), false)
		}
		if noBody && x.emptyStream(resp) {
			closeResp(resp)
			return x.failed(ErrStreamCut, false)
		}
		if noBody {
			x.accepted = resp
			return nil
		}
	case w != nil:
		var whole bool
		var err error
		if prefix, whole, err = w.start(resp); err != nil {
			return x.failed(err, false)
		}
		switch {
		case whole && x.t.StreamEnd != nil && isEventStream(resp.Header):
			resp.Body = http.NoBody // the stream is in prefix: handed over, so that its end is checked
		case whole:
			readUsage(ctx, resp.Header, prefix) // the attempt ends on return
			resp.Body = memBody{bytes.NewReader(prefix), nil}
			x.accepted = resp
			return nil
		}
	}
	sb := &streamBody{rc: resp.Body, prefix: prefix, w: w, ctx: ctx, finished: make(chan struct{}), first: len(prefix) > 0,
		usage: newUsageReader(ctx, resp.Header)}
	if sb.first {
		stage.FirstByte(ctx) // the prefix holds it
	}
	if isEventStream(resp.Header) && (!sb.first || x.t.StreamEnd != nil) {
		sb.sse = newSSEScanner(x.t.keepalives())
		sb.sse.end = x.t.StreamEnd
	}
	resp.Body = keepWriter(resp.Body, sb)
	x.stream = sb
	x.handed = resp
	return compose.ErrHandOver
}

// emptyStream reports whether resp, which has no body, is an event stream
// that should have ended with the Transport's StreamEnd.
func (x *exchange) emptyStream(resp *http.Response) bool {
	return x.t.StreamEnd != nil && isEventStream(resp.Header) && x.req.Method != http.MethodHead &&
		resp.StatusCode/100 == 2 && resp.StatusCode != http.StatusNoContent
}

// failed returns err, marked with policy.Permanent if it may not be
// retried; unprocessed says the server did not act on the request.
func (x *exchange) failed(err error, unprocessed bool) error {
	if x.mayRetry(unprocessed) {
		return err
	}
	x.stopped = true
	return policy.Permanent(err)
}

func (x *exchange) mayRetry(unprocessed bool) bool {
	return x.replayable && (x.idempotent || x.t.RetryUnsafe || unprocessed)
}

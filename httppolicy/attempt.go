package httppolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/retry"
)

// attempt is the policy.Func: it sends the request once. An accepted
// response with a body to stream is handed over (see handOver).
func (x *exchange) attempt(ctx context.Context) (err error) {
	if err := x.enter(ctx); err != nil {
		return err
	}
	defer x.mu.Unlock()
	switch {
	case x.accepted != nil || x.stream != nil:
		// The policy called fn again after the response was accepted.
		return retry.Permanent(errDone)
	case x.stopped:
		// An earlier attempt failed in a way that may not be retried (a
		// POST answered 500), and the policy ignored its marker.
		return retry.Permanent(errStopped)
	}
	closeResp(x.last) // an earlier attempt's failure is no longer the call's
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
	if x.judge(resp) {
		return x.failureStatus(w, resp)
	}
	return x.accept(ctx, w, resp)
}

// request returns the request an attempt sends, with context ctx. A
// shallow copy, as http.Client sends: a RoundTripper must not modify the
// request. The first attempt sends req.Body; the base transport closes
// it, so later ones send a copy from GetBody.
func (x *exchange) request(ctx context.Context) (*http.Request, error) {
	r := x.req.WithContext(ctx)
	if !x.hasBody || !x.bodySent {
		x.bodySent = x.hasBody
		return r, nil
	}
	if x.req.GetBody == nil {
		return nil, retry.Permanent(errors.New("httppolicy: request body already sent and GetBody is nil"))
	}
	body, err := x.req.GetBody()
	if err != nil {
		return nil, retry.Permanent(fmt.Errorf("httppolicy: GetBody: %w", err))
	}
	r.Body = body
	return r, nil
}

// noResponse ends an attempt whose base RoundTrip returned resp and err
// with one of them nil.
func (x *exchange) noResponse(w *streamWatch, r *http.Request, resp *http.Response, err error) error {
	if resp == nil && err == nil {
		// A broken base, reported as http.Client reports one. A breaker
		// counts it, and no retry repeats it: every call through this
		// base would fail alike. The base should have closed the body it
		// was given: close it in its place, as a RoundTripper must.
		if r.Body != nil {
			r.Body.Close()
		}
		x.stopped = true
		return retry.Permanent(fmt.Errorf("httppolicy: Transport.Base (%T) returned a nil *http.Response with a nil error", x.base))
	}
	closeResp(resp)
	if w != nil {
		if te := w.timedOut(); te != nil {
			err = te // net/http's error says only that the request was canceled
		}
	}
	return x.failed(err, unprocessedError(err))
}

// judge tells Signals of resp and reports whether resp is a failure
// (IsFailure). If either panics or calls runtime.Goexit, resp's body is
// closed on the way out: no one else holds the response yet.
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

// failureStatus ends an attempt whose response is a failure. Its body is
// read now, while the attempt's context is live: the connection goes back
// to the pool, and the response stays readable if it is the last.
func (x *exchange) failureStatus(w *streamWatch, resp *http.Response) error {
	if w != nil && resp.Body != nil {
		resp.Body = &firstByteBody{ReadCloser: resp.Body, w: w}
	}
	bufferBody(resp)
	if w != nil && !w.firstByteIn() {
		// Its first byte came too late: the timeout is the failure.
		resp.Body.Close()
		return x.failed(w.cause(), false)
	}
	x.last = resp
	return x.failed(newStatusError(resp), unprocessedStatus(resp.StatusCode))
}

// accept takes resp, a response that is not a failure. A response whose
// body is in memory (none, or read whole while waiting for its first
// byte) ends the attempt, and RoundTrip returns it once Execute returns.
// Any other is handed over.
func (x *exchange) accept(ctx context.Context, w *streamWatch, resp *http.Response) error {
	noBody := resp.Body == nil || resp.Body == http.NoBody
	var prefix []byte
	switch {
	case noBody || resp.StatusCode == http.StatusSwitchingProtocols:
		// Nothing to stream, or a switched connection, whose first byte
		// may be the caller's to send: the headers are the first byte.
		if w != nil && !w.firstByteIn() {
			closeResp(resp)
			return x.failed(w.cause(), false)
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
		if whole {
			resp.Body = &memBody{b: prefix}
			x.accepted = resp
			return nil
		}
	}
	return x.handOver(ctx, w, resp, prefix)
}

// handOver gives resp to the caller while its attempt, and every policy
// above it, stays open until the body ends. With runSync the attempt
// returns compose.ErrHandOver and the call is held; otherwise the attempt
// sends resp on out and waits for the body's end, or its context's.
func (x *exchange) handOver(ctx context.Context, w *streamWatch, resp *http.Response, prefix []byte) error {
	sb := &streamBody{rc: resp.Body, prefix: prefix, w: w, ctx: ctx, finished: make(chan struct{})}
	if rw, ok := resp.Body.(io.Writer); ok {
		// 101 Switching Protocols: net/http's body is an
		// io.ReadWriteCloser, and the call lasts as long as the
		// connection.
		resp.Body = &switchedBody{streamBody: sb, w: rw}
	} else {
		resp.Body = sb
	}
	x.stream = sb
	if x.sus != nil {
		x.handed = resp
		return compose.ErrHandOver
	}
	sb.done = make(chan error, 1)
	x.out <- result{resp: resp}
	select {
	case err := <-sb.done:
		return sb.attemptErr(err, false)
	case <-ctx.Done():
		// The base transport aborts the body, whose reads now fail.
		return sb.attemptErr(nil, true)
	}
}

// failed returns err, the failure of an attempt; unprocessed says whether
// the server plainly did not act on the request. A failure that may not be
// retried is marked with retry.Permanent, and no attempt sends after it.
func (x *exchange) failed(err error, unprocessed bool) error {
	if x.mayRetry(unprocessed) {
		return err
	}
	x.stopped = true
	return retry.Permanent(err)
}

// mayRetry reports whether a failed attempt may be retried; unprocessed
// says whether the failure shows plainly that the server did not act on it.
func (x *exchange) mayRetry(unprocessed bool) bool {
	return x.replayable && (x.idempotent || x.t.RetryUnsafe || unprocessed)
}

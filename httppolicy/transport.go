package httppolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

var _ http.RoundTripper = (*Transport)(nil)

var (
	errNilPolicy = errors.New("httppolicy: Transport.Policy is nil")
	errNilReq    = errors.New("httppolicy: nil Request")
	errNoRun     = errors.New("httppolicy: the policy returned without sending the request")
	errDone      = errors.New("httppolicy: the exchange is over: a policy called fn again after the response was accepted")
)

// Transport is an [http.RoundTripper] that sends each request through a
// [policy.Policy], usually a *compose.Pipeline of bulkhead, deadline, retry
// and breaker: one call of Policy.Execute per request, which lasts until the
// response body has been read to its end or closed. See the package
// documentation for what is retried, what counts as a failure and what the
// caller gets.
//
// Set the fields before the first request and do not change them
// afterwards; a Transport is then safe for concurrent use by multiple
// goroutines. The zero value has no Policy: its RoundTrip returns an error.
type Transport struct {
	// Base sends each attempt. Nil means [http.DefaultTransport]; see
	// [NewDependencyTransport] for one sized to a bulkhead.
	Base http.RoundTripper

	// Policy runs each request. It is required: with a nil Policy,
	// RoundTrip returns an error.
	Policy policy.Policy

	// IsFailure reports whether a response is a failure of the dependency,
	// to be retried and counted by a breaker like a transport error. Nil
	// means [DefaultIsFailure] (5xx, 408, 429). It may be called
	// concurrently and must not read or close the body.
	IsFailure func(*http.Response) bool

	// RetryUnsafe lets non-idempotent requests (POST, PATCH, without an
	// idempotency key) be retried after any failure, as idempotent ones are.
	// When false, they are retried only when the server plainly did not
	// process them: connection refused, 429 or 503.
	RetryUnsafe bool

	// FirstByteTimeout, if > 0, bounds each attempt's wait from sending the
	// request to the first byte of the response body (to the headers, for a
	// response without a body); for a text/event-stream response, to the
	// end of its first event that is not a keepalive. RoundTrip hands the
	// response over only once that byte is in, so a late first byte is the
	// attempt's failure ([ErrFirstByteTimeout]), counted by a breaker and
	// retried when the request may be. Zero means no such timeout; a
	// request may set its own with [WithStreamTimeouts]. It must not be
	// negative.
	FirstByteTimeout time.Duration

	// IdleTimeout, if > 0, bounds how long a Read of a response body handed
	// over waits for data: the timer runs only while a Read waits (a slow
	// reader is not a stalled stream), and for a text/event-stream response
	// only events that are not keepalives restart it. When it fires, that
	// Read fails with [ErrIdleTimeout], and the call ends as a failure,
	// counted by a breaker and never retried. Zero means no such timeout; a
	// request may set its own with [WithStreamTimeouts]. It must not be
	// negative.
	IdleTimeout time.Duration

	// KeepaliveEvents are the event types of a text/event-stream response
	// that neither FirstByteTimeout nor IdleTimeout counts, as they do not
	// count comment lines. Nil means ["ping"] (Anthropic's keepalive); an
	// empty slice, none.
	KeepaliveEvents []string

	// Name names the Transport in its errors and telemetry (the
	// watertight.policy.name attribute of its first_byte and idle
	// timeouts). Empty is allowed.
	Name string

	// MeterProvider provides the watertight.timeouts counter of the stream
	// timeouts. If nil, the global MeterProvider is used.
	MeterProvider metric.MeterProvider

	// tel holds the timeout records, built on first use.
	tel atomic.Pointer[streamTelemetry]

	// Signals, if not nil, is told of every response an attempt receives,
	// successes included, before the attempt's outcome reaches the policy
	// (see [Signals]): usually the pipeline's *ratelimit.Limiter, whose
	// shared hold the rate-limit headers feed.
	Signals Signals
}

// RoundTrip sends req through t.Policy and returns the response, or the
// error the call ended with. When the retries end on a failure status, it
// returns that last response with a nil error, as [http.DefaultTransport]
// would have. The response's body holds the policy's resources (a bulkhead
// slot, the deadline's context, the breaker's verdict) until it is read to
// EOF or closed: close it, as net/http requires. If the request's context or
// a timeout of the policy ends the stream, the body's Read fails with the
// error the call ended with (a timeout matches deadline.ErrExceeded), as
// RoundTrip would have returned it before the headers. With a first byte
// timeout (Transport.FirstByteTimeout or [WithStreamTimeouts]), it returns
// only once the first byte of the body that counts is in; the stream
// timeouts do not watch the connection of a 101 Switching Protocols
// response. It closes req.Body, even on error, and does not modify req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, errNilReq
	}
	if t.Policy == nil {
		closeReqBody(req)
		return nil, errNilPolicy
	}
	st, err := t.streamTimeoutsOf(req.Context())
	if err != nil {
		closeReqBody(req)
		return nil, err
	}
	x := newExchange(t, req)
	x.timeouts = st
	go x.run(stage.WithAnswerClock(req.Context(), &x.clock))
	r := <-x.out
	if r.panicked {
		panic(r.panicVal)
	}
	return r.resp, r.err
}

// CloseIdleConnections closes the idle connections of Base (of
// http.DefaultTransport if Base is nil), if it has such a method, as
// http.Client.CloseIdleConnections asks of its Transport.
func (t *Transport) CloseIdleConnections() {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if c, ok := base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// result is what RoundTrip's caller gets.
type result struct {
	resp     *http.Response
	err      error
	panicked bool
	panicVal any
}

// exchange is one RoundTrip: one Execute of the policy, with every attempt
// it makes. Its fields other than out and finished are used only by the
// goroutine that runs Execute (attempts run one after another).
type exchange struct {
	t         *Transport
	req       *http.Request
	base      http.RoundTripper
	isFailure func(*http.Response) bool

	timeouts   streamTimeouts
	hasBody    bool // req has a body to send
	replayable bool // the body, if any, can be sent again
	idempotent bool

	attempts int
	bodySent bool           // req.Body was given to the base transport
	pending  *http.Response // last failure response, body in memory
	accepted *http.Response // a success without a body, returned at the end
	stream   *streamBody    // the body of the response handed over, if any
	handed   bool           // a response has been sent on out

	out      chan result   // 1-buffered: exactly one send per exchange
	finished chan struct{} // made with the stream; closed once Execute has returned

	// One attempt at a time (see enter); idle is made by waitIdle.
	state atomic.Int32
	idle  chan struct{}

	// clock marks when each attempt got its response headers, so that an
	// adaptive limit in the pipeline samples the time to the answer, not
	// the time until the caller has read a stream (see internal/stage).
	clock stage.AnswerClock
}

func newExchange(t *Transport, req *http.Request) *exchange {
	x := &exchange{
		t:          t,
		req:        req,
		base:       t.Base,
		isFailure:  t.IsFailure,
		hasBody:    req.Body != nil && req.Body != http.NoBody,
		idempotent: idempotent(req),
		out:        make(chan result, 1),
	}
	if x.base == nil {
		x.base = http.DefaultTransport
	}
	if x.isFailure == nil {
		x.isFailure = DefaultIsFailure
	}
	x.replayable = !x.hasBody || req.GetBody != nil
	return x
}

// run executes the policy and delivers the outcome, if no attempt has
// delivered a response already. It runs on its own goroutine so that the
// policy's Execute (and with it the bulkhead slot and the deadline's
// context) can outlive RoundTrip while the caller reads the body.
func (x *exchange) run(ctx context.Context) {
	growStack(0)
	defer func() {
		if x.finished != nil {
			close(x.finished)
		}
	}()
	finished := false
	defer func() {
		if finished {
			return
		}
		// A panic (or runtime.Goexit) below: the policies have freed what
		// they held. Hand the panic to RoundTrip's caller if it still
		// waits. Otherwise the caller has the response, and the panic came
		// from a policy's work after the body ended (a user hook such as
		// OnStateChange or OnTimeout): re-raising it on this goroutine,
		// which nobody can recover, would kill the process, so it is
		// reported to otel.Handle instead.
		v := recover()
		x.waitIdle()
		x.discardPending()
		x.closeUnsentBody()
		if !x.handed {
			x.handed = true
			x.out <- result{panicked: true, panicVal: v}
			return
		}
		if v != nil {
			otel.Handle(fmt.Errorf("httppolicy: panic in a policy after the response was returned: %v", v))
		}
	}()
	err := x.t.Policy.Execute(ctx, x.attempt)
	x.waitIdle()
	finished = true
	if x.stream != nil {
		// Before finished is closed: the body's final Read reads it then.
		x.stream.setCallErr(err)
	}
	x.finish(ctx, err)
}

// finish delivers Execute's outcome err.
func (x *exchange) finish(ctx context.Context, err error) {
	if x.handed {
		// The caller has the response and has seen any stream error
		// through Read.
		return
	}
	x.handed = true
	if err == nil && x.accepted != nil {
		x.out <- result{resp: x.accepted}
		return
	}
	x.closeAccepted()
	// Retries ended on a failure status: the caller gets the response
	// itself, unless it gave up on the call.
	if se, ok := errors.AsType[*StatusError](err); ok && x.pending != nil && se.Response == x.pending && ctx.Err() == nil {
		resp := x.pending
		x.pending = nil
		x.out <- result{resp: resp}
		return
	}
	x.discardPending()
	x.closeUnsentBody()
	if err == nil {
		err = errNoRun
	}
	// Without a retry policy to take it off, the Permanent marker of an
	// attempt is still on the error: the caller should not see it.
	x.out <- result{err: retry.Unmark(err)}
}

// attempt is the policy.Func: one attempt of the exchange.
func (x *exchange) attempt(ctx context.Context) error {
	if !x.state.CompareAndSwap(exchangeIdle, exchangeRunning) {
		return retry.Permanent(errConcurrent)
	}
	defer x.leave()
	if x.handed || x.accepted != nil {
		return retry.Permanent(errDone)
	}
	x.attempts++
	// The previous attempt's failure response is of no more use.
	x.discardPending()

	// With a stream timeout, the request carries a child of ctx that the
	// timers cancel (see streamWatch).
	var w *streamWatch
	rctx := ctx
	if x.timeouts.firstByte > 0 || x.timeouts.idle > 0 {
		w = newStreamWatch(x.t, ctx, x.timeouts)
		defer w.end()
		rctx = w.ctx
	}
	// A shallow copy, as http.Client sends: a RoundTripper must not modify
	// the request, and a deep copy (Request.Clone) would cost more than
	// the rest of the Transport's own work.
	r := x.req.WithContext(rctx)
	if x.hasBody {
		if !x.bodySent {
			x.bodySent = true // the base transport closes it
		} else {
			if x.req.GetBody == nil {
				return retry.Permanent(errors.New("httppolicy: request body already sent and GetBody is nil"))
			}
			body, err := x.req.GetBody()
			if err != nil {
				return retry.Permanent(fmt.Errorf("httppolicy: GetBody: %w", err))
			}
			r.Body = body
		}
	}

	resp, err := x.base.RoundTrip(r)
	if resp == nil && err == nil {
		// A broken base, reported as http.Client reports one. It is the
		// attempt's failure, and a breaker counts it: the dependency's
		// client stack is broken, and every call through it would fail
		// alike. For the same reason it is not retried. The base should
		// have closed the body it was given: close it in its place, as a
		// RoundTripper must.
		if r.Body != nil {
			r.Body.Close()
		}
		return retry.Permanent(fmt.Errorf("httppolicy: Transport.Base (%T) returned a nil *http.Response with a nil error", x.base))
	}
	x.clock.Answered()
	if err != nil {
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		if w != nil {
			if te := w.timedOut(); te != nil {
				// net/http's error says only that the request was
				// canceled.
				err = te
			}
		}
		if !x.mayRetry(unprocessedError(err)) {
			return retry.Permanent(err)
		}
		return err
	}
	if x.t.Signals != nil {
		x.observe(resp)
	}

	if x.isFailure(resp) {
		// Read the body now, while the attempt's context is live: the
		// connection goes back to the pool, and the response stays readable
		// if it turns out to be the last.
		if w != nil && resp.Body != nil {
			resp.Body = &firstByteBody{ReadCloser: resp.Body, w: w}
		}
		bufferBody(resp)
		if w != nil && !w.firstByteIn() {
			// Its first byte came too late: the timeout, not the status,
			// is the attempt's failure.
			resp.Body.Close()
			return x.failed(w.cause())
		}
		x.pending = resp
		se := &StatusError{Response: resp, StatusCode: resp.StatusCode}
		if d, ok := ParseRetryAfter(resp.Header, time.Now()); ok {
			se.RetryAfterDelay = d
		}
		if !x.mayRetry(unprocessedStatus(resp.StatusCode)) {
			return retry.Permanent(se)
		}
		return se
	}

	if resp.Body == nil || resp.Body == http.NoBody || resp.StatusCode == http.StatusSwitchingProtocols {
		// Nothing to stream (or a switched connection, whose first byte
		// may be the caller's to send): the headers are the first byte.
		if w != nil && !w.firstByteIn() {
			if resp.Body != nil {
				resp.Body.Close()
			}
			return x.failed(w.cause())
		}
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		// Nothing to stream: the call ends now and RoundTrip returns the
		// response when Execute does.
		x.accepted = resp
		return nil
	}

	var prefix []byte
	if w != nil && resp.StatusCode != http.StatusSwitchingProtocols {
		w.watchResponse(resp)
		if w.firstByte > 0 {
			// Hand the response over only once its first byte that counts
			// is in: until then, a late byte is this attempt's failure,
			// which may be retried.
			p, eof, err := w.readFirst(resp.Body, resp.ContentLength)
			if err != nil {
				resp.Body.Close()
				return x.failed(err)
			}
			if eof {
				// The whole body is in: the call ends now.
				resp.Body.Close()
				w.whole.b = p
				resp.Body = &w.whole
				x.accepted = resp
				return nil
			}
			prefix = p
		} else {
			w.firstByteIn()
		}
		if w.idle > 0 {
			w.startIdle()
		} else {
			w = nil // nothing more to watch in the body
		}
	} else {
		w = nil
	}

	// Accepted: hand the response over now, and keep this attempt (and
	// every policy above it) open while the caller reads the body.
	x.finished = make(chan struct{})
	sb := &streamBody{rc: resp.Body, prefix: prefix, w: w, done: make(chan error, 1), finished: x.finished}
	if w, ok := resp.Body.(io.Writer); ok {
		// 101 Switching Protocols: net/http's body is an
		// io.ReadWriteCloser, and the call lasts as long as the
		// connection.
		resp.Body = &switchedBody{streamBody: sb, w: w}
	} else {
		resp.Body = sb
	}
	x.stream = sb
	x.handed = true
	x.out <- result{resp: resp}
	select {
	case err := <-sb.done:
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return sb.endedByContext(ctx)
		}
		// Nothing is retried once the caller has the response: a broken
		// stream is a failure for the breaker, and the end of the call.
		return retry.Permanent(err)
	case <-ctx.Done():
		// The deadline or the caller's cancellation ends the stream: the
		// base transport aborts the body, whose reads now fail.
		return sb.endedByContext(ctx)
	}
}

// States of exchange.state.
const (
	exchangeIdle int32 = iota
	exchangeRunning
	exchangeWaited // running, and waitIdle waits for it
)

// errConcurrent is what an attempt returns when its policy starts it while
// another attempt of the same exchange runs.
var errConcurrent = errors.New("httppolicy: the policy ran two attempts of a request at once (a hedge): not supported, since they would share one request and one response")

// leave marks the running attempt as over, and wakes waitIdle.
func (x *exchange) leave() {
	if x.state.Swap(exchangeIdle) == exchangeWaited {
		close(x.idle)
	}
}

// waitIdle returns once no attempt runs. It is called once Execute has
// returned: a policy that ran attempts concurrently (a hedge) may return
// before an attempt it canceled has, and the exchange's fields are the
// running attempt's until it returns.
func (x *exchange) waitIdle() {
	if x.state.Load() == exchangeIdle {
		return
	}
	x.idle = make(chan struct{}) // published by the CompareAndSwap
	if x.state.CompareAndSwap(exchangeRunning, exchangeWaited) {
		<-x.idle
	}
}

// failed returns err, the failure of an attempt that may have reached the
// server, marked with retry.Permanent if it may not be retried.
func (x *exchange) failed(err error) error {
	if !x.mayRetry(false) {
		return retry.Permanent(err)
	}
	return err
}

// mayRetry reports whether a failed attempt may be retried; unprocessed says
// whether the failure shows plainly that the server did not act on it.
func (x *exchange) mayRetry(unprocessed bool) bool {
	return x.replayable && (x.idempotent || x.t.RetryUnsafe || unprocessed)
}

// observe tells Transport.Signals of resp. If Signals panics or calls
// runtime.Goexit, resp's body is closed on the way out, so that its
// connection is not left open (no one else holds the response yet); the
// panic goes on.
func (x *exchange) observe(resp *http.Response) {
	told := false
	defer func() {
		if !told && resp.Body != nil {
			resp.Body.Close()
		}
	}()
	x.t.Signals.Observe(resp)
	told = true
}

func (x *exchange) discardPending() {
	if x.pending != nil {
		x.pending.Body.Close()
		x.pending = nil
	}
}

func (x *exchange) closeAccepted() {
	if x.accepted != nil {
		if x.accepted.Body != nil {
			x.accepted.Body.Close()
		}
		x.accepted = nil
	}
}

// closeUnsentBody closes req.Body if no attempt gave it to the base
// transport: a RoundTripper must close it in every case.
func (x *exchange) closeUnsentBody() {
	if x.hasBody && !x.bodySent {
		x.bodySent = true
		x.req.Body.Close()
	}
}

func closeReqBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// growStack grows the stack of the exchange's new goroutine once, at its
// start, while only a frame or two are on it. Execute's calls through a
// pipeline of policies down to the base transport run deeper than a new
// goroutine's stack, and a stack grown there is copied frame by frame
// under every one of them, which the benchmarks (bench, BenchmarkTransport)
// showed to cost more CPU than all the policies together.
//
//go:noinline
func growStack(i int) byte {
	var buf [12 << 10]byte
	return buf[i]
}

package httppolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

var _ http.RoundTripper = (*Transport)(nil)

// holder is a pipeline that can hand a call over (*compose.Pipeline, and
// types that embed one).
type holder interface {
	Start(ctx context.Context, fn policy.Func) (*compose.Held, error)
	Holds() bool
}

var (
	errNilPolicy = errors.New("httppolicy: Transport.Policy is nil")
	errNilReq    = errors.New("httppolicy: nil Request")
	errNoRun     = errors.New("httppolicy: the policy returned without sending the request")
	errDone      = errors.New("httppolicy: the exchange is over: a policy called fn again after the response was accepted")
	// errConcurrent is what an attempt returns when its policy starts it
	// while another attempt of the same request runs.
	errConcurrent = errors.New("httppolicy: the policy ran two attempts of a request at once: a Transport sends one at a time; hedge with Hedging around the Transport")
	errHedge      = errors.New("httppolicy: Transport.Policy is a *retry.Hedge; wrap the Transport in a Hedging instead")
	errStopped    = errors.New("httppolicy: the request may not be sent again after a failure that may not be retried")
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
	// response without a body); for a text/event-stream response that is
	// not encoded, to its first event that counts (see the package
	// documentation). RoundTrip hands the response over only once that
	// byte is in, so a late first byte is the attempt's failure
	// ([ErrFirstByteTimeout]), counted by a breaker and retried when the
	// request may be. Zero means no such timeout; a request may set its own
	// with [WithStreamTimeouts]. It must not be negative.
	FirstByteTimeout time.Duration

	// IdleTimeout, if > 0, bounds how long Reads of a response body handed
	// over wait for data that counts. Its timer runs only while a Read
	// waits (a slow reader is not a stalled stream). Any byte restarts it,
	// but for a text/event-stream response that is not encoded only a
	// Read that completes an event that counts (or brings more data of an
	// event past 4 KiB) does: the waits of the Reads in between add up
	// (see the package documentation). When it
	// fires, that Read fails with [ErrIdleTimeout], and the call ends as a
	// failure, counted by a breaker and never retried. Zero means no such
	// timeout; a request may set its own with [WithStreamTimeouts]. It must
	// not be negative.
	IdleTimeout time.Duration

	// KeepaliveEvents are the event types of a text/event-stream response
	// that neither FirstByteTimeout nor IdleTimeout counts, as they do not
	// count comment lines, unless the event has more than 4 KiB of data.
	// Nil means ["ping"] (Anthropic's keepalive); an empty slice, none.
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
	// (see [Signals]): usually [LimiterSignals] of the pipeline's
	// *ratelimit.Limiter, whose shared hold the rate-limit headers feed.
	Signals Signals
}

// RoundTrip sends req through t.Policy and returns the response, or the
// error the call ended with. When the retries end on a failure status, it
// returns that last response with a nil error, as [http.DefaultTransport]
// would have, or, if req's context is done, the context's error. The
// response's body holds the policy's resources (a bulkhead slot, the
// deadline's context, the breaker's verdict) until it is read to EOF or
// closed: close it, as net/http requires. If the request's context or
// a timeout of the policy ends the stream, the body's Read fails with the
// error the call ended with (a timeout matches deadline.ErrExceeded), as
// RoundTrip would have returned it before the headers. With a first byte
// timeout (Transport.FirstByteTimeout or [WithStreamTimeouts]), it returns
// only once the first byte of the body that counts is in; the stream
// timeouts do not watch the connection of a 101 Switching Protocols
// response. The Policy runs one attempt at a time: to hedge, wrap the
// Transport in a [Hedging]. It closes req.Body, even on error, and does
// not modify req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, errNilReq
	}
	if t.Policy == nil {
		closeReqBody(req)
		return nil, errNilPolicy
	}
	if _, ok := t.Policy.(*retry.Hedge); ok {
		closeReqBody(req)
		return nil, errHedge
	}
	st, err := t.streamTimeoutsOf(req.Context())
	if err != nil {
		closeReqBody(req)
		return nil, err
	}
	x := newExchange(t, req)
	x.timeouts = st
	ctx := req.Context()
	if x.sus != nil {
		return x.runSync(ctx)
	}
	x.out = make(chan result, 1)
	go x.run(ctx)
	r := <-x.out
	if r.panicked {
		if r.panicVal == nil {
			// runtime.Goexit (recover reports nil for nothing else): it
			// ends the caller's goroutine, as it would have had the
			// attempt run there.
			runtime.Goexit()
		}
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
// it makes, one at a time (see enter). Execute runs on one goroutine (run
// or runSync) until the response is handed over; a suspended call resumes
// on the goroutine that ends the body.
type exchange struct {
	t         *Transport
	req       *http.Request
	base      http.RoundTripper
	isFailure func(*http.Response) bool

	timeouts   streamTimeouts
	hasBody    bool // req has a body to send
	replayable bool // the body, if any, can be sent again
	idempotent bool
	// sus, if not nil, is the policy as a pipeline that holds across a
	// hand-over: Start runs on RoundTrip's goroutine, and the attempt whose
	// response is handed over returns compose.ErrHandOver instead of
	// waiting for the body to end (see runSync). Otherwise Execute runs on
	// a goroutine of its own (run).
	sus holder

	out chan result // 1-buffered: exactly one send per exchange; nil with sus

	// state guards against a policy that runs fn concurrently with itself
	// or after Execute returned (see enter); idle is made by waitIdle,
	// closed by exit.
	state atomic.Int32
	idle  chan struct{}

	bodySent bool // req.Body was given to the base transport
	won      bool // an attempt's response was accepted
	// stopped: an attempt failed in a way that may not be retried: no
	// attempt sends after it.
	stopped bool
	// pending is the failure response (body in memory) of the latest
	// attempt: the call's error may name it (StatusError.Response), and
	// the caller then gets it (see outcome).
	pending  *http.Response
	accepted *http.Response // a success without a body, returned at the end
	stream   *streamBody    // the body of the response handed over, if any
	finished chan struct{}  // made with the stream; closed once Execute has returned
	handed   bool           // a response has been sent on out (or, with sus, handed over)

	// With sus, once the call is suspended: the call, and what the
	// winning attempt does when it ends (see resume).
	suspended  *compose.Held
	actx       context.Context // the winning attempt's context
	watch      *streamWatch    // the winning attempt's watch, if any
	handedResp *http.Response
	stopAfter  func() bool // stops the resume by the end of actx

	// watch1 is the stream watch of the first attempt that needs one,
	// held here to spare an allocation (see send); later attempts
	// allocate theirs.
	watch1     streamWatch
	watch1Used bool
}

// States of exchange.state.
const (
	exIdle    int32 = iota // no attempt runs
	exRunning              // an attempt runs
	exWaited               // an attempt runs, and waitIdle waits for it
	exClosed               // Execute has returned: no attempt enters
)

func newExchange(t *Transport, req *http.Request) *exchange {
	x := &exchange{
		t:          t,
		req:        req,
		base:       t.Base,
		isFailure:  t.IsFailure,
		hasBody:    req.Body != nil && req.Body != http.NoBody,
		idempotent: idempotent(req),
	}
	if x.base == nil {
		x.base = http.DefaultTransport
	}
	if x.isFailure == nil {
		x.isFailure = DefaultIsFailure
	}
	x.replayable = !x.hasBody || req.GetBody != nil
	if h, ok := t.Policy.(holder); ok && h.Holds() {
		x.sus = h
	}
	return x
}

// runSync executes the policy on RoundTrip's goroutine and returns the
// outcome. The attempt whose response is handed over with its body still
// streaming suspends the call: runSync returns the response at once, and
// the body's end (EOF, a read error, Close) or the end of the attempt's
// context, whichever comes first, resumes it (see resume). A panic or
// runtime.Goexit below goes on up RoundTrip's caller once the policies
// have freed what they held.
func (x *exchange) runSync(ctx context.Context) (*http.Response, error) {
	finished := false
	defer func() {
		if !finished {
			x.waitIdle()
			x.cleanUp()
		}
	}()
	s, err := x.sus.Start(ctx, x.attempt)
	finished = true
	if s != nil {
		// The attempt that suspended the call still runs: no other
		// enters until resume.
		x.suspended = s
		sb := x.stream
		x.stopAfter = context.AfterFunc(x.actx, func() {
			// The deadline or the caller's cancellation ends the stream,
			// read or not: the call ends now, as it would have had the
			// attempt been waiting for the body.
			if sb.ended.CompareAndSwap(false, true) {
				x.resume(nil, true)
			}
		})
		return x.handedResp, nil
	}
	x.waitIdle()
	r := x.outcome(ctx, err)
	x.cleanUp()
	return r.resp, r.err
}

// resume ends the suspended call: the winning attempt ends with the
// stream's outcome, streamErr (nil: EOF or Close), or, if byCtx, the end
// of its context, as the attempt waiting in send would have; then the
// policies decide and exit. It is called once, by the first of the body's
// end and the end of the attempt's context, and closes finished when it
// returns. A panic in a policy's work after fn (a user hook) is reported
// to otel.Handle, as run reports it: the caller has the response. What
// follows mirrors run from Execute's return.
func (x *exchange) resume(streamErr error, byCtx bool) {
	finishedClosed := false
	closeFinished := func() {
		if !finishedClosed {
			finishedClosed = true
			close(x.finished)
		}
	}
	defer closeFinished()
	if !byCtx {
		x.stopAfter()
	}
	sb, ctx := x.stream, x.actx
	var err error
	switch {
	case byCtx:
		err = sb.endedByContext(ctx)
	case streamErr == nil:
	case ctx.Err() != nil:
		err = sb.endedByContext(ctx)
	default:
		err = streamErr
	}
	if x.watch != nil {
		x.watch.end()
	}
	x.exit() // the suspended attempt ends
	finished := false
	defer func() {
		if finished {
			return
		}
		if v := recover(); v != nil {
			// Reported before finished is closed, as run does.
			otel.Handle(fmt.Errorf("httppolicy: panic in a policy after the response was returned: %v\n\n%s", v, debug.Stack()))
		}
		x.waitIdle()
		x.cleanUp()
		closeFinished()
	}()
	err = x.suspended.End(err)
	x.waitIdle()
	finished = true
	// Before finished is closed: the body's final Read reads it then.
	sb.setCallErr(err)
	closeFinished()
	x.cleanUp()
}

// run executes the policy and delivers the outcome, if no attempt has
// delivered a response already. It runs on its own goroutine so that the
// policy's Execute (and with it the bulkhead slot and the deadline's
// context) can outlive RoundTrip while the caller reads the body.
func (x *exchange) run(ctx context.Context) {
	growStack(0)
	finishedClosed := false
	closeFinished := func() {
		if x.finished != nil && !finishedClosed {
			finishedClosed = true
			close(x.finished)
		}
	}
	defer closeFinished()
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
		x.cleanUp()
		if !x.handed {
			closeFinished()
			x.handed = true
			x.out <- result{panicked: true, panicVal: v}
			return
		}
		if v != nil {
			// Before the body's Close returns (finished): the caller
			// that closed it finds the panic reported.
			otel.Handle(fmt.Errorf("httppolicy: panic in a policy after the response was returned: %v\n\n%s", v, debug.Stack()))
		}
		closeFinished()
	}()
	err := x.t.Policy.Execute(ctx, x.attempt)
	x.waitIdle()
	finished = true
	if x.stream != nil {
		// Before finished is closed: the body's final Read reads it then.
		x.stream.setCallErr(err)
	}
	closeFinished()
	x.finish(ctx, err)
}

// finish delivers Execute's outcome err, once what the attempts left is
// freed: the caller finds the request body closed.
func (x *exchange) finish(ctx context.Context, err error) {
	if x.handed {
		// The caller has the response and has seen any stream error
		// through Read.
		x.cleanUp()
		return
	}
	x.handed = true
	r := x.outcome(ctx, err)
	x.cleanUp()
	x.out <- r
}

// outcome returns what RoundTrip returns when Execute returned err without
// a response handed over.
func (x *exchange) outcome(ctx context.Context, err error) result {
	if err == nil && x.accepted != nil {
		return result{resp: x.accepted}
	}
	x.closeAccepted()
	// Retries ended on a failure status: the caller gets the response
	// itself, or, if its context is done (however the policy's error
	// wraps the status), that context's error. The StatusError is the
	// policies' view of the response, never the caller's.
	if se, ok := errors.AsType[*StatusError](err); ok {
		if cerr := ctx.Err(); cerr != nil {
			return result{err: cerr}
		}
		if x.takePending(se.Response) {
			return result{resp: se.Response}
		}
	}
	if err == nil {
		err = errNoRun
	}
	// Without a retry policy to take it off, the Permanent marker of an
	// attempt is still on the error: the caller should not see it.
	return result{err: retry.Unmark(err)}
}

// takePending reports whether resp is the failure response of the
// latest attempt, and if so takes it: it is the caller's.
func (x *exchange) takePending(resp *http.Response) bool {
	if resp == nil || resp != x.pending {
		return false
	}
	x.pending = nil
	return true
}

// cleanUp frees what the attempts left once none runs: the failure
// response not handed over, and the request body if no attempt sent it.
func (x *exchange) cleanUp() {
	x.discardPending()
	x.closeUnsentBody()
}

// attempt is the policy.Func: one attempt of the exchange.
func (x *exchange) attempt(ctx context.Context) error {
	if err := x.enter(ctx); err != nil {
		return err
	}
	var a try
	defer x.exitUnlessSuspended(&a)
	if err := x.admit(&a); err != nil {
		return err
	}
	return x.send(ctx, &a)
}

// try is one attempt's own state.
type try struct {
	won    bool          // its response was accepted
	bodyOK bool          // it sends req.Body itself (the first to send)
	body   io.ReadCloser // the copy of the body it sends (GetBody's), if not req.Body
	watch1 bool          // it may use the exchange's watch1
	// suspended: it handed its response over and suspended the call;
	// resume ends it.
	suspended bool
}

// final returns err marked with retry.Permanent, as the failure of an
// attempt that may not be retried, and notes that no attempt may send
// after it.
func (x *exchange) final(err error) error {
	x.stopped = true
	return retry.Permanent(err)
}

// enter marks an attempt as running, or returns the error it returns at
// once: the policy runs fn concurrently with itself (a hedge's way:
// Hedging hedges), or after Execute returned. The refusal is cheap and
// loud, where the exchange's state would otherwise be raced.
func (x *exchange) enter(ctx context.Context) error {
	if x.state.CompareAndSwap(exIdle, exRunning) {
		return nil
	}
	if x.state.Load() != exClosed {
		return retry.Permanent(errConcurrent)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return retry.Permanent(errDone)
}

// exit marks the attempt as over, and wakes waitIdle.
func (x *exchange) exit() {
	if x.state.Swap(exIdle) == exWaited {
		close(x.idle)
	}
}

// exitUnlessSuspended is exit, unless a suspended the call: resume ends
// it then.
func (x *exchange) exitUnlessSuspended(a *try) {
	if !a.suspended {
		x.exit()
	}
}

// waitIdle returns once no attempt runs, and makes any attempt started
// later return at once. A policy returns after its attempt has; this
// covers one that does not, before the exchange reads what attempts
// wrote.
func (x *exchange) waitIdle() {
	for !x.state.CompareAndSwap(exIdle, exClosed) {
		// Written before the CompareAndSwap that publishes it to exit.
		x.idle = make(chan struct{})
		if x.state.CompareAndSwap(exRunning, exWaited) {
			<-x.idle
		}
		x.idle = nil
	}
}

// admit sets the state a of an attempt about to send, or returns the
// error it returns without sending.
func (x *exchange) admit(a *try) error {
	switch {
	case x.won:
		// The policy called fn again after the response was accepted.
		return retry.Permanent(errDone)
	case x.stopped:
		// An earlier attempt failed in a way that may not be retried (a
		// POST answered 500), and the policy ignored its marker.
		return retry.Permanent(errStopped)
	}
	// An earlier attempt's failure response is no longer the call's.
	x.discardPending()
	if x.hasBody {
		if x.bodySent {
			// req.Body is an earlier attempt's (the base transport closes
			// it): this one sends a copy.
			body, err := x.getBody()
			if err != nil {
				return retry.Permanent(err)
			}
			a.body = body
		} else {
			x.bodySent, a.bodyOK = true, true
		}
	}
	if !x.watch1Used {
		x.watch1Used, a.watch1 = true, true
	}
	return nil
}

// getBody returns a copy of the request's body to send, from GetBody.
func (x *exchange) getBody() (io.ReadCloser, error) {
	if x.req.GetBody == nil {
		return nil, errors.New("httppolicy: request body already sent and GetBody is nil")
	}
	body, err := x.req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("httppolicy: GetBody: %w", err)
	}
	return body, nil
}

// win makes a's response the exchange's.
func (x *exchange) win(a *try) {
	x.won, a.won = true, true
}

// send sends the request once, as attempt a, and waits, if its response is
// accepted, until the caller is done with the body.
func (x *exchange) send(ctx context.Context, a *try) error {
	rctx, w := x.watchFor(ctx, a)
	if w != nil {
		defer x.endWatch(w, a)
	}
	// A shallow copy, as http.Client sends: a RoundTripper must not modify
	// the request, and a deep copy (Request.Clone) would cost more than
	// the rest of the Transport's own work.
	r := x.req.WithContext(rctx)
	if x.hasBody && !a.bodyOK {
		// req.Body is another attempt's (the base transport closes it):
		// this one sends the copy enter got.
		r.Body = a.body
	}

	resp, err := x.base.RoundTrip(r)
	if resp == nil || err != nil {
		return x.noResponse(w, r, resp, err)
	}
	stage.Answered(ctx)
	if x.t.Signals != nil {
		x.observe(resp)
	}
	if x.failure(resp) {
		return x.failureStatus(w, resp)
	}
	noBody := resp.Body == nil || resp.Body == http.NoBody
	if noBody || resp.StatusCode == http.StatusSwitchingProtocols {
		// Nothing to stream (or a switched connection, whose first byte
		// may be the caller's to send): the headers are the first byte.
		if w != nil && !w.firstByteIn() {
			if resp.Body != nil {
				resp.Body.Close()
			}
			return x.failed(w.cause())
		}
		if noBody {
			// The call ends now and RoundTrip returns the response when
			// Execute does.
			x.win(a)
			x.accepted = resp
			return nil
		}
		return x.handOver(ctx, a, resp, nil, nil, w)
	}
	if w == nil {
		return x.handOver(ctx, a, resp, nil, nil, nil)
	}
	prefix, whole, err := x.firstBytes(w, resp)
	switch {
	case err != nil:
		return err
	case whole:
		// The whole body is in (resp's own is closed): the call ends now.
		x.win(a)
		w.whole.b = prefix
		resp.Body = &w.whole
		x.accepted = resp
		return nil
	case w.idle > 0:
		return x.handOver(ctx, a, resp, prefix, w, w)
	}
	return x.handOver(ctx, a, resp, prefix, nil, w) // nothing more to watch in the body
}

// watchFor returns the context attempt a sends its request with and, with
// a stream timeout, the watch whose timers cancel it (see streamWatch).
func (x *exchange) watchFor(ctx context.Context, a *try) (context.Context, *streamWatch) {
	if x.timeouts.firstByte <= 0 && x.timeouts.idle <= 0 {
		return ctx, nil
	}
	w := &x.watch1
	if !a.watch1 {
		w = new(streamWatch)
	}
	w.init(x.t, ctx, x.timeouts)
	return w.ctx, w
}

// noResponse ends an attempt whose base RoundTrip returned resp and err
// with one of them nil: a broken base, or the exchange's failure.
func (x *exchange) noResponse(w *streamWatch, r *http.Request, resp *http.Response, err error) error {
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
		return x.final(fmt.Errorf("httppolicy: Transport.Base (%T) returned a nil *http.Response with a nil error", x.base))
	}
	stage.Answered(r.Context())
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if w != nil {
		if te := w.timedOut(); te != nil {
			// net/http's error says only that the request was canceled.
			err = te
		}
	}
	if !x.mayRetry(unprocessedError(err)) {
		return x.final(err)
	}
	return err
}

// failureStatus ends an attempt whose response is a failure by IsFailure:
// its body is read now, while the attempt's context is live, so that the
// connection goes back to the pool and the response stays readable if it
// turns out to be the last.
func (x *exchange) failureStatus(w *streamWatch, resp *http.Response) error {
	if w != nil && resp.Body != nil {
		resp.Body = &firstByteBody{ReadCloser: resp.Body, w: w}
	}
	bufferBody(resp)
	if w != nil && !w.firstByteIn() {
		// Its first byte came too late: the timeout, not the status, is
		// the attempt's failure.
		resp.Body.Close()
		return x.failed(w.cause())
	}
	x.pending = resp
	se := newStatusError(resp)
	if !x.mayRetry(unprocessedStatus(resp.StatusCode)) {
		return x.final(se)
	}
	return se
}

// firstBytes watches resp's body with w and, with a first byte timeout,
// reads until its first byte that counts is in: until then, a late byte is
// this attempt's failure, which may be retried. It returns the bytes read,
// and whole if they are the whole body (resp's own body is then closed).
// An idle timeout starts once the first byte is in.
func (x *exchange) firstBytes(w *streamWatch, resp *http.Response) (p []byte, whole bool, err error) {
	w.watchResponse(resp)
	if w.firstByte <= 0 {
		w.firstByteIn()
	} else {
		var eof bool
		if p, eof, err = w.readFirst(resp.Body, resp.ContentLength); err != nil {
			resp.Body.Close()
			return nil, false, x.failed(err)
		}
		if eof {
			resp.Body.Close()
			return p, true, nil
		}
	}
	if w.idle > 0 {
		w.startIdle()
	}
	return p, false, nil
}

// handOver accepts resp: it hands the response over now, and keeps this
// attempt (and every policy above it) open while the caller reads the
// body, which w watches (nil: nothing to watch).
func (x *exchange) handOver(ctx context.Context, a *try, resp *http.Response, prefix []byte, w, watch *streamWatch) error {
	x.win(a)
	x.finished = make(chan struct{})
	sb := &streamBody{rc: resp.Body, prefix: prefix, w: w, finished: x.finished}
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
	if x.sus != nil {
		// Suspend the call: RoundTrip returns the response, and the
		// body's end resumes the call (see runSync).
		sb.x = x
		x.handedResp, x.actx, x.watch = resp, ctx, watch
		a.suspended = true
		return compose.ErrHandOver
	}
	sb.done = make(chan error, 1)
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

// endWatch ends attempt a's watch w, unless a suspended the call: resume
// ends it then.
func (x *exchange) endWatch(w *streamWatch, a *try) {
	if !a.suspended {
		w.end()
	}
}

// failed returns err, the failure of an attempt, which may have reached
// the server, marked with retry.Permanent if it may not be retried.
func (x *exchange) failed(err error) error {
	if !x.mayRetry(false) {
		return x.final(err)
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

// failure reports whether resp is a failure (Transport.IsFailure). If
// IsFailure panics or calls runtime.Goexit, resp's body is closed on the
// way out, as observe closes it.
func (x *exchange) failure(resp *http.Response) bool {
	told := false
	defer func() {
		if !told && resp.Body != nil {
			resp.Body.Close()
		}
	}()
	f := x.isFailure(resp)
	told = true
	return f
}

// discardPending closes the failure response not handed over.
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
// transport: a RoundTripper must close it in every case. It is called once
// no attempt runs.
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

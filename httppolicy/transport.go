package httppolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
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
// response. Under a policy that runs attempts concurrently (a hedge), a
// request that may be retried after any failure is sent by each attempt,
// and the first accepted response is returned (see the package
// documentation); any other request is never sent twice at once. It closes
// req.Body, even on error, and does not modify req.
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
	ctx := req.Context()
	if x.clocked {
		ctx = stage.WithAnswerClock(ctx, &x.clock)
	}
	go x.run(ctx)
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
// it makes. Attempts may run concurrently (a hedge: see hedgeable), each
// with its own request, context and response; what they share is guarded
// by mu. The fields above mu are set before Execute starts and only read
// afterwards.
type exchange struct {
	t         *Transport
	req       *http.Request
	base      http.RoundTripper
	isFailure func(*http.Response) bool

	timeouts   streamTimeouts
	hasBody    bool // req has a body to send
	replayable bool // the body, if any, can be sent again
	idempotent bool
	// hedgeable: the policy may run attempts concurrently (a hedge) and
	// the request may be retried after any failure, so each attempt sends
	// it, with a context of its own that the winner cancels. Otherwise an
	// attempt started while another runs waits for it to end (see enter):
	// the request is never sent twice at once.
	hedgeable bool
	// clocked: clock is in Execute's context (see RoundTrip), since the
	// policy runs attempts one at a time. Package compose starts the clock
	// for each attempt before fn runs, so concurrent attempts would share
	// it even when this exchange makes the later ones wait.
	clocked bool

	out chan result // 1-buffered: exactly one send per exchange

	mu       sync.Mutex
	running  int                       // attempts inside fn
	idle     chan struct{}             // made by a waiter, closed when running drops to 0
	bodySent bool                      // req.Body was given to the base transport
	won      bool                      // an attempt's response was accepted: the winner's
	over     bool                      // the winning attempt has returned
	overCh   chan struct{}             // made by a losing attempt, closed when over is set
	ended    bool                      // Execute has returned and no attempt runs
	cancels  []context.CancelCauseFunc // of a hedgeable exchange's attempts, by number - 1
	pending  *http.Response            // last failure response, body in memory
	// Written by the winning attempt before it returns, read by run once
	// no attempt runs (mu orders them).
	accepted *http.Response // a success without a body, returned at the end
	stream   *streamBody    // the body of the response handed over, if any
	finished chan struct{}  // made with the stream; closed once Execute has returned
	handed   bool           // a response has been sent on out

	// clock marks when the attempt got its response headers, so that an
	// adaptive limit in the pipeline samples the time to the answer, not
	// the time until the caller has read a stream (see internal/stage).
	// It is one per exchange and package compose starts it for each
	// attempt, so it is used only when attempts cannot run concurrently
	// (see clocked).
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
	concurrent := mayHedge(t.Policy)
	x.hedgeable = concurrent && x.mayRetry(false)
	x.clocked = !concurrent
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
	var a try
	if err := x.enter(ctx, &a); err != nil {
		return err
	}
	defer x.leave(&a)
	err := x.send(ctx, &a)
	if err != nil && !a.won {
		x.mu.Lock()
		lost := x.won
		x.mu.Unlock()
		if lost {
			// Another attempt's response was accepted.
			if a.ctx != nil && context.Cause(a.ctx) == errLost {
				// Canceled by the winner: an outcome that says nothing
				// about the dependency.
				return x.lose(ctx)
			}
			// A failure that completed all the same, which a breaker
			// counts; it must not end the call, which is the winner's: no
			// Permanent marker.
			return retry.Unmark(err)
		}
	}
	return err
}

// try is one attempt's own state.
type try struct {
	ctx    context.Context // the request's, canceled with errLost when another attempt wins; nil if no other attempt may run
	n      int             // 1-based, in the order attempts entered
	won    bool            // its response was accepted
	bodyOK bool            // it sends req.Body itself (the first to send)
}

// errLost is the cause with which the winning attempt cancels the others'
// requests.
var errLost = errors.New("httppolicy: another attempt's response was accepted")

// lostError is what a losing attempt returns: it matches
// context.Canceled, so that a breaker excludes it and a hedge takes it for
// what it is.
type lostError struct{}

func (lostError) Error() string        { return errLost.Error() }
func (lostError) Is(target error) bool { return target == context.Canceled || target == errLost }

// enter admits an attempt and sets its state a, or returns the error the
// attempt returns without sending anything.
func (x *exchange) enter(ctx context.Context, a *try) error {
	x.mu.Lock()
	for {
		switch {
		case x.ended:
			// A policy called fn after its Execute returned.
			x.mu.Unlock()
			return retry.Permanent(errDone)
		case x.won && x.over && policy.Claim(ctx):
			// Attempts one after another (no other attempt holds the
			// claim): the policy called fn again after the response was
			// accepted.
			x.mu.Unlock()
			return retry.Permanent(errDone)
		case x.won:
			// A hedge started beside the winner, or after it but before
			// the policy learned of it: nothing to send.
			x.running++
			x.mu.Unlock()
			err := x.lose(ctx)
			x.leave(a)
			return err
		}
		if x.running == 0 || x.hedgeable {
			break
		}
		// A request that may not be sent twice at once: this attempt
		// waits for the running one to end, and goes on only if the call
		// has not ended meanwhile.
		ch := x.idleChan()
		x.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		x.mu.Lock()
	}
	x.running++
	a.n = len(x.cancels) + 1
	if !x.bodySent {
		x.bodySent = true
		a.bodyOK = true
	}
	if x.hedgeable {
		var cancel context.CancelCauseFunc
		a.ctx, cancel = context.WithCancelCause(ctx)
		x.cancels = append(x.cancels, cancel)
	}
	x.mu.Unlock()
	return nil
}

// waitIdle returns once no attempt runs, and makes any attempt started
// later return at once. It is called once Execute has returned: a policy
// that ran attempts concurrently (a hedge) may return before an attempt it
// canceled has, and the exchange's outcome is read only once every attempt
// has returned.
func (x *exchange) waitIdle() {
	x.mu.Lock()
	for x.running > 0 {
		ch := x.idleChan()
		x.mu.Unlock()
		<-ch
		x.mu.Lock()
	}
	x.ended = true
	x.mu.Unlock()
}

// idleChan returns the channel closed when no attempt runs. mu is held.
func (x *exchange) idleChan() chan struct{} {
	if x.idle == nil {
		x.idle = make(chan struct{})
	}
	return x.idle
}

// leave marks attempt a as over: it wakes an attempt or waitIdle waiting
// for the running ones, and the losers waiting for the winner.
func (x *exchange) leave(a *try) {
	x.mu.Lock()
	x.running--
	if x.running == 0 && x.idle != nil {
		close(x.idle)
		x.idle = nil
	}
	var cancel context.CancelCauseFunc
	if a.ctx != nil {
		cancel = x.cancels[a.n-1]
	}
	if a.won {
		x.over = true
		if x.overCh != nil {
			close(x.overCh)
		}
	}
	x.mu.Unlock()
	if cancel != nil {
		cancel(nil)
	}
}

// win makes a's response the exchange's, if no other attempt's is and the
// policy grants a the claim (policy.Claim: a hedge's winner), and cancels
// the other attempts' requests. It reports whether a won.
func (x *exchange) win(ctx context.Context, a *try) bool {
	x.mu.Lock()
	if x.won || !policy.Claim(ctx) {
		x.mu.Unlock()
		return false
	}
	x.won, a.won = true, true
	// No attempt registers once won is set: the slice is read unlocked.
	cancels := x.cancels
	x.mu.Unlock()
	for i, cancel := range cancels {
		if i != a.n-1 {
			cancel(errLost)
		}
	}
	return true
}

// lose waits until the winning attempt has returned or ctx ends, and
// returns a losing attempt's outcome. Waiting keeps a hedge from taking the
// loser for a failure and starting another attempt in its place while the
// winner's stream runs.
func (x *exchange) lose(ctx context.Context) error {
	x.mu.Lock()
	if x.over {
		x.mu.Unlock()
		return lostError{}
	}
	if x.overCh == nil {
		x.overCh = make(chan struct{})
	}
	ch := x.overCh
	x.mu.Unlock()
	select {
	case <-ch:
		return lostError{}
	case <-ctx.Done():
		if context.Cause(ctx) == retry.ErrHedgeLost {
			return lostError{}
		}
		return ctx.Err()
	}
}

// send sends the request once, as attempt a, and waits, if its response is
// accepted, until the caller is done with the body.
func (x *exchange) send(ctx context.Context, a *try) error {
	// With a stream timeout, the request carries a child of ctx that the
	// timers cancel (see streamWatch).
	var w *streamWatch
	rctx := ctx
	if a.ctx != nil {
		rctx = a.ctx
	}
	if x.timeouts.firstByte > 0 || x.timeouts.idle > 0 {
		w = newStreamWatch(x.t, rctx, x.timeouts)
		defer w.end()
		rctx = w.ctx
	}
	// A shallow copy, as http.Client sends: a RoundTripper must not modify
	// the request, and a deep copy (Request.Clone) would cost more than
	// the rest of the Transport's own work.
	r := x.req.WithContext(rctx)
	if x.hasBody && !a.bodyOK {
		// req.Body is another attempt's (the base transport closes it):
		// this one sends a copy.
		if x.req.GetBody == nil {
			return retry.Permanent(errors.New("httppolicy: request body already sent and GetBody is nil"))
		}
		body, err := x.req.GetBody()
		if err != nil {
			return retry.Permanent(fmt.Errorf("httppolicy: GetBody: %w", err))
		}
		r.Body = body
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
	if x.clocked {
		x.clock.Answered()
	}
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
		x.mu.Lock()
		if !x.won {
			x.pending = resp
		}
		x.mu.Unlock()
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
		if !x.win(ctx, a) {
			if resp.Body != nil {
				resp.Body.Close()
			}
			return nil
		}
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
				if !x.win(ctx, a) {
					return nil
				}
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

	// Accepted, if no other attempt's response was: hand the response
	// over now, and keep this attempt (and every policy above it) open
	// while the caller reads the body. A response that lost is closed
	// (its connection is not reused before its body is drained) and is a
	// success that publishes nothing.
	if !x.win(ctx, a) {
		if w != nil {
			w.closing()
		}
		resp.Body.Close()
		return nil
	}
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
// transport: a RoundTripper must close it in every case. It is called once
// no attempt runs.
func (x *exchange) closeUnsentBody() {
	x.mu.Lock()
	unsent := x.hasBody && !x.bodySent
	x.bodySent = true
	x.mu.Unlock()
	if unsent {
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

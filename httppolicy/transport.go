package httppolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
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
	// A claim in the request's context is an outer call's (RoundTrip runs
	// inside an attempt of a hedge further out): its attempt claims it
	// once its own work has succeeded, and an attempt of this exchange
	// must not take it when its response is accepted (see win), as
	// policy.Do hides it from its fn. The Policy's own hedge, if any, puts
	// its claim in each attempt's context.
	ctx := policy.WithoutClaimer(req.Context())
	if x.clocked {
		ctx = x.clock.Init(ctx)
	}
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
	// concurrent: the policy may run attempts concurrently (mayHedge).
	concurrent bool
	// sus, if not nil, is the policy as a pipeline that holds across a
	// hand-over: Start runs on RoundTrip's goroutine, and the attempt whose
	// response is handed over returns compose.ErrHandOver instead of
	// waiting for the body to end (see runSync). Otherwise Execute runs on
	// a goroutine of its own (run).
	sus holder

	out chan result // 1-buffered: exactly one send per exchange; nil with sus

	mu      sync.Mutex
	running int           // attempts inside fn
	wake    chan struct{} // made by a waiter, closed when running drops to 0, won or over is set, or ended
	// bodySent: req.Body was given to the base transport.
	bodySent bool
	// noReplay: GetBody failed while another attempt was sending: no
	// more attempts send beside a running one, as if the body could not be
	// replayed (see enter).
	noReplay bool
	won      bool                      // an attempt's response was accepted: the winner's
	over     bool                      // the winning attempt has returned
	ended    bool                      // Execute has returned: no attempt enters or wins any more
	stopped  bool                      // an attempt failed in a way that may not be retried: no attempt enters any more
	cancels  []context.CancelCauseFunc // of a hedgeable exchange's attempts, by number - 1
	// pending holds the failure responses (bodies in memory) of the
	// attempts since the last one that ran alone: the call's error names
	// one of them (StatusError.Response), which the caller gets (see
	// finish). Concurrent attempts may fail in any order, and the policy's
	// order of their results is not the order they got their responses.
	pending []*http.Response
	// Written by the winning attempt before it returns, read by run once
	// it has (mu orders them).
	accepted *http.Response // a success without a body, returned at the end
	stream   *streamBody    // the body of the response handed over, if any
	finished chan struct{}  // made with the stream; closed once Execute has returned
	handed   bool           // a response has been sent on out (or, with sus, handed over)

	// With sus, once the call is suspended: the call, and what the
	// winning attempt does when it ends (see resume).
	suspended  *compose.Held
	actx       context.Context // the winning attempt's context
	watch      *streamWatch    // the winning attempt's watch, if any
	winner     try
	handedResp *http.Response
	stopAfter  func() bool // stops the resume by the end of actx

	// clock marks when the attempt got its response headers, so that an
	// adaptive limit in the pipeline samples the time to the answer, not
	// the time until the caller has read a stream (see internal/stage).
	// It is one per exchange and package compose starts it for each
	// attempt, so it is used only when attempts cannot run concurrently
	// (see clocked). It is the context that carries the clock too, held
	// here to spare an allocation.
	clock stage.ClockContext

	// watch1 is the stream watch of the first attempt that needs one,
	// held here to spare an allocation (see send); later attempts
	// allocate theirs.
	watch1     streamWatch
	watch1Used bool // under mu
}

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
	x.concurrent = mayHedge(t.Policy)
	x.hedgeable = x.concurrent && x.mayRetry(false)
	x.clocked = !x.concurrent
	if h, ok := t.Policy.(holder); ok && !x.concurrent && h.Holds() {
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
	x.endCall()
	r := x.outcome(ctx, err)
	x.waitIdle()
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
	a := x.winner
	a.suspended = false
	x.leave(&a)
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
	x.endCall()
	finished = true
	// Before finished is closed: the body's final Read reads it then.
	sb.setCallErr(err)
	closeFinished()
	x.waitIdle()
	x.cleanUp()
}

// run executes the policy and delivers the outcome, if no attempt has
// delivered a response already. It runs on its own goroutine so that the
// policy's Execute (and with it the bulkhead slot and the deadline's
// context) can outlive RoundTrip while the caller reads the body.
//
// The outcome is delivered as soon as Execute has returned and the winning
// attempt, if any, with it: a policy that runs attempts concurrently (a
// hedge) returns without waiting for the attempts it canceled, and one
// whose base transport ignores its context must not hold up the winner's
// caller. What such attempts hold (a failure response, the unsent request
// body) is freed once the last of them returns.
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
	x.endCall()
	finished = true
	if x.stream != nil {
		// Before finished is closed: the body's final Read reads it then.
		x.stream.setCallErr(err)
	}
	closeFinished()
	x.finish(ctx, err)
	x.waitIdle()
	x.cleanUp()
}

// finish delivers Execute's outcome err.
func (x *exchange) finish(ctx context.Context, err error) {
	if x.handed {
		// The caller has the response and has seen any stream error
		// through Read.
		return
	}
	x.handed = true
	x.out <- x.outcome(ctx, err)
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

// takePending reports whether resp is the failure response of one of the
// exchange's attempts, and if so takes it out of pending: it is the
// caller's.
func (x *exchange) takePending(resp *http.Response) bool {
	if resp == nil {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, p := range x.pending {
		if p == resp {
			x.pending = append(x.pending[:i], x.pending[i+1:]...)
			return true
		}
	}
	return false
}

// cleanUp frees what the attempts left once none runs: the failure
// responses not handed over, and the request body if no attempt sent it.
func (x *exchange) cleanUp() {
	x.discardPending()
	x.closeUnsentBody()
}

// attempt is the policy.Func: one attempt of the exchange.
//
// A panic (or runtime.Goexit) in an attempt that has lost (another
// attempt's response was accepted, or the call has ended: a Signals that
// panics on a late response, a base transport that panics as it returns)
// is reported to otel.Handle, and the attempt returns as a loser: carried
// through the policy, a hedge would take it to the caller and cancel the
// winner's stream, or, after the call, crash the process from the hedge's
// goroutine. A panic in any other attempt goes on.
func (x *exchange) attempt(ctx context.Context) (err error) {
	var a try
	if err := x.enter(ctx, &a); err != nil {
		return err
	}
	defer x.leave(&a)
	normal := false
	defer func() {
		if normal || a.won {
			return
		}
		x.mu.Lock()
		lost := x.won || x.ended
		x.mu.Unlock()
		if !lost {
			return
		}
		if v := recover(); v != nil {
			// With the stack: the panic is not re-raised, and nothing
			// else shows where it came from.
			otel.Handle(fmt.Errorf("httppolicy: panic in an attempt that lost to another's: %v\n\n%s", v, debug.Stack()))
			err = lostError{}
		}
	}()
	err = x.send(ctx, &a)
	normal = true
	if err != nil && !a.won {
		x.mu.Lock()
		lost := x.won
		x.mu.Unlock()
		if lost {
			// Another attempt's response was accepted.
			if a.ctx != nil && context.Cause(a.ctx) == errLost {
				// Canceled by the winner: an outcome that says nothing
				// about the dependency. It returns at once (a timeout of
				// its own must not fire while it waits): the hedge, whose
				// claim the winner holds, starts no attempt in its place.
				return lostError{}
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
	body   io.ReadCloser   // the copy of the body it sends (GetBody's), if not req.Body
	watch1 bool            //  it may use the exchange's watch1
	// stops: it failed in a way that may not be retried (its error is
	// marked with retry.Permanent): no attempt of the exchange sends after
	// it (see leave and enter).
	stops bool
	// suspended: it handed its response over and suspended the call;
	// resume ends it.
	suspended bool
}

// final returns err marked with retry.Permanent, as the failure of a that
// may not be retried, and notes that no attempt may send after a.
func (a *try) final(err error) error {
	a.stops = true
	return retry.Permanent(err)
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
//
// An attempt started while another runs goes on beside it only if the
// exchange is hedgeable and it has a copy of the body to send (GetBody);
// otherwise it waits for the running one to end, and goes on only if the
// call has not ended and no response was accepted meanwhile. If GetBody
// fails while another attempt sends, the body is taken for one that cannot
// be replayed: this attempt (and any later one) waits, and its failure
// says nothing about the dependency; it ends the call only if no other
// attempt is left to send.
//
// An attempt that may run only alone (the request is not hedgeable, or its
// body could not be copied) under a policy that may run attempts
// concurrently takes the policy's claim (policy.Claim) as it enters: a
// retry.Hedge starts no attempt beside one that holds its claim. The claim
// goes back to the hedge if the attempt fails.
func (x *exchange) enter(ctx context.Context, a *try) error {
	var body io.ReadCloser // a copy of req.Body for this attempt
	x.mu.Lock()
	for {
		if err := x.refusedLocked(ctx); err != nil {
			x.mu.Unlock()
			if body != nil {
				body.Close()
			}
			return err
		}
		if x.running == 0 || (x.hedgeable && !x.noReplay) {
			if !x.hasBody || !x.bodySent || body != nil {
				break
			}
			// req.Body is another attempt's (the base transport closes
			// it): this one sends a copy. The state may change while
			// GetBody runs: look again once it has returned.
			x.mu.Unlock()
			b, gerr := x.getBody()
			x.mu.Lock()
			if gerr == nil {
				body = b
				continue
			}
			if x.running == 0 {
				// No other attempt sends: the call cannot go on.
				x.mu.Unlock()
				return retry.Permanent(gerr)
			}
			x.noReplay = true
		}
		// Wait for the running attempt to end, or for a response to be
		// accepted, or for the call to end.
		ch := x.wakeChan()
		x.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			if body != nil {
				body.Close()
			}
			return ctx.Err()
		}
		x.mu.Lock()
	}
	x.admitLocked(ctx, a, body)
	x.mu.Unlock()
	return nil
}

// refusedLocked returns the error an attempt entering now ends with
// without sending, or nil if it may go on. x.mu must be held.
func (x *exchange) refusedLocked(ctx context.Context) error {
	switch {
	case x.ended:
		// Execute has returned. A hedge's attempt started as its call
		// ended finds its context done: an outcome that says nothing about
		// the dependency. Otherwise a policy called fn after its Execute
		// returned.
		if err := ctx.Err(); err != nil {
			return err
		}
		return retry.Permanent(errDone)
	case x.won && x.over && policy.Claim(ctx):
		// Attempts one after another (no other attempt holds the claim):
		// the policy called fn again after the response was accepted.
		return retry.Permanent(errDone)
	case x.won:
		// A hedge started beside the winner, or after it but before the
		// policy learned of it: nothing to send.
		return lostError{}
	case x.stopped:
		// An attempt failed in a way that may not be retried (a POST
		// answered 500, say): the call ends with its failure, and no
		// attempt sends after it, not even one that was waiting for it to
		// end as a hedge started it (whose policy has not learned of the
		// failure yet). This one says nothing about the dependency: a
		// breaker excludes it, and a hedge ignores it while the failed
		// attempt holds its claim.
		return lostError{}
	}
	return nil
}

// admitLocked admits attempt a, which sends body (nil: req.Body, or no
// body). x.mu must be held.
func (x *exchange) admitLocked(ctx context.Context, a *try, body io.ReadCloser) {
	if x.running == 0 && !x.hedgeable {
		// Attempts one after another: an earlier one's failure response
		// is no longer the call's.
		x.discardPendingLocked()
	}
	x.running++
	a.n = len(x.cancels) + 1
	if !x.bodySent {
		x.bodySent = true
		a.bodyOK = true
	}
	a.body = body
	if !x.watch1Used {
		x.watch1Used = true
		a.watch1 = true
	}
	if x.hedgeable {
		var cancel context.CancelCauseFunc
		a.ctx, cancel = context.WithCancelCause(ctx)
		x.cancels = append(x.cancels, cancel)
	}
	if x.concurrent && (!x.hedgeable || x.noReplay) {
		// It must run alone: keep a hedge from starting attempts beside
		// it (each would call OnHedge, take from the budget and wait). If
		// another attempt still holds the claim (it has left but its
		// failure has not reached the hedge yet), this one claims when its
		// response is accepted, as any attempt does (see win).
		policy.Claim(ctx)
	}
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

// endCall is called once Execute has returned: it waits for the winning
// attempt, if any, to return (a policy returns after its attempt has; this
// covers one that does not), and makes any attempt that enters or gets its
// response later return at once.
func (x *exchange) endCall() {
	x.mu.Lock()
	for x.won && !x.over {
		ch := x.wakeChan()
		x.mu.Unlock()
		<-ch
		x.mu.Lock()
	}
	x.ended = true
	x.wakeAll()
	x.mu.Unlock()
}

// waitIdle returns once no attempt runs, and makes any attempt started
// later return at once. A policy that ran attempts concurrently (a hedge)
// may return before an attempt it canceled has: what the exchange's
// attempts hold is freed only once every attempt has returned.
func (x *exchange) waitIdle() {
	x.mu.Lock()
	x.ended = true
	for x.running > 0 {
		ch := x.wakeChan()
		x.mu.Unlock()
		<-ch
		x.mu.Lock()
	}
	x.wakeAll()
	x.mu.Unlock()
}

// wakeChan returns the channel closed at the next change that a waiter
// looks for (see wakeAll). mu is held.
func (x *exchange) wakeChan() chan struct{} {
	if x.wake == nil {
		x.wake = make(chan struct{})
	}
	return x.wake
}

// wakeAll wakes every waiter: an attempt waiting for the running one
// (enter), endCall waiting for the winner, waitIdle for the last attempt.
// mu is held.
func (x *exchange) wakeAll() {
	if x.wake != nil {
		close(x.wake)
		x.wake = nil
	}
}

// leave marks attempt a as over, unless it suspended the call: it wakes
// an attempt, endCall or waitIdle waiting for it.
func (x *exchange) leave(a *try) {
	if a.suspended {
		return
	}
	x.mu.Lock()
	x.running--
	if a.won {
		x.over = true
	}
	if a.stops && !a.won {
		x.stopped = true
	}
	if x.running == 0 || a.won {
		x.wakeAll()
	}
	var cancel context.CancelCauseFunc
	if a.ctx != nil {
		cancel = x.cancels[a.n-1]
	}
	x.mu.Unlock()
	if cancel != nil {
		cancel(nil)
	}
}

// win makes a's response the exchange's, if no other attempt's is, the
// call has not ended, and the policy grants a the claim (policy.Claim: a
// hedge's winner), and cancels the other attempts' requests. It reports
// whether a won. Attempts waiting to enter return at once.
func (x *exchange) win(ctx context.Context, a *try) bool {
	x.mu.Lock()
	if x.won || x.ended || !policy.Claim(ctx) {
		x.mu.Unlock()
		return false
	}
	x.won, a.won = true, true
	x.wakeAll()
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
		return x.noResponse(a, w, r, resp, err)
	}
	if x.clocked {
		x.clock.Clock.Answered()
	}
	if x.t.Signals != nil {
		x.observe(resp)
	}
	if x.failure(resp) {
		return x.failureStatus(a, w, resp)
	}
	noBody := resp.Body == nil || resp.Body == http.NoBody
	if noBody || resp.StatusCode == http.StatusSwitchingProtocols {
		// Nothing to stream (or a switched connection, whose first byte
		// may be the caller's to send): the headers are the first byte.
		if w != nil && !w.firstByteIn() {
			if resp.Body != nil {
				resp.Body.Close()
			}
			return x.failed(a, w.cause())
		}
		if noBody {
			// The call ends now and RoundTrip returns the response when
			// Execute does.
			if x.win(ctx, a) {
				x.accept(resp)
			} else if resp.Body != nil {
				resp.Body.Close()
			}
			return nil
		}
		return x.handOver(ctx, a, resp, nil, nil, w)
	}
	if w == nil {
		return x.handOver(ctx, a, resp, nil, nil, nil)
	}
	prefix, whole, err := x.firstBytes(a, w, resp)
	switch {
	case err != nil:
		return err
	case whole:
		// The whole body is in (resp's own is closed): the call ends now.
		if x.win(ctx, a) {
			w.whole.b = prefix
			resp.Body = &w.whole
			x.accept(resp)
		}
		return nil
	case w.idle > 0:
		return x.handOver(ctx, a, resp, prefix, w, w)
	}
	return x.handOver(ctx, a, resp, prefix, nil, w) // nothing more to watch in the body
}

// watchFor returns the context attempt a sends its request with and, with
// a stream timeout, the watch whose timers cancel it (see streamWatch).
func (x *exchange) watchFor(ctx context.Context, a *try) (context.Context, *streamWatch) {
	rctx := ctx
	if a.ctx != nil {
		rctx = a.ctx
	}
	if x.timeouts.firstByte <= 0 && x.timeouts.idle <= 0 {
		return rctx, nil
	}
	w := &x.watch1
	if !a.watch1 {
		w = new(streamWatch)
	}
	w.init(x.t, rctx, x.timeouts)
	return w.ctx, w
}

// noResponse ends attempt a, whose base RoundTrip returned resp and err
// with one of them nil: a broken base, or the exchange's failure.
func (x *exchange) noResponse(a *try, w *streamWatch, r *http.Request, resp *http.Response, err error) error {
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
		return a.final(fmt.Errorf("httppolicy: Transport.Base (%T) returned a nil *http.Response with a nil error", x.base))
	}
	if x.clocked {
		x.clock.Clock.Answered()
	}
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
		return a.final(err)
	}
	return err
}

// failureStatus ends attempt a, whose response is a failure by IsFailure:
// its body is read now, while the attempt's context is live, so that the
// connection goes back to the pool and the response stays readable if it
// turns out to be the last.
func (x *exchange) failureStatus(a *try, w *streamWatch, resp *http.Response) error {
	if w != nil && resp.Body != nil {
		resp.Body = &firstByteBody{ReadCloser: resp.Body, w: w}
	}
	bufferBody(resp)
	if w != nil && !w.firstByteIn() {
		// Its first byte came too late: the timeout, not the status, is
		// the attempt's failure.
		resp.Body.Close()
		return x.failed(a, w.cause())
	}
	x.mu.Lock()
	if !x.won && !x.ended {
		x.pending = append(x.pending, resp)
	}
	x.mu.Unlock()
	se := &StatusError{Response: resp, StatusCode: resp.StatusCode}
	if d, ok := ParseRetryAfter(resp.Header, time.Now()); ok {
		se.RetryAfterDelay = d
	}
	if !x.mayRetry(unprocessedStatus(resp.StatusCode)) {
		return a.final(se)
	}
	return se
}

// accept makes resp, whose body is whole (or absent), the call's
// response: the attempt won it.
func (x *exchange) accept(resp *http.Response) {
	x.mu.Lock()
	x.accepted = resp
	x.mu.Unlock()
}

// firstBytes watches resp's body with w and, with a first byte timeout,
// reads until its first byte that counts is in: until then, a late byte is
// this attempt's failure, which may be retried. It returns the bytes read,
// and whole if they are the whole body (resp's own body is then closed).
// An idle timeout starts once the first byte is in.
func (x *exchange) firstBytes(a *try, w *streamWatch, resp *http.Response) (p []byte, whole bool, err error) {
	w.watchResponse(resp)
	if w.firstByte <= 0 {
		w.firstByteIn()
	} else {
		var eof bool
		if p, eof, err = w.readFirst(resp.Body, resp.ContentLength); err != nil {
			resp.Body.Close()
			return nil, false, x.failed(a, err)
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

// handOver accepts resp, if no other attempt's response was: it hands the
// response over now, and keeps this attempt (and every policy above it)
// open while the caller reads the body, which w watches (nil: nothing to
// watch). A response that lost is closed (its connection is not reused
// before its body is drained) and is a success that publishes nothing.
func (x *exchange) handOver(ctx context.Context, a *try, resp *http.Response, prefix []byte, w, watch *streamWatch) error {
	if !x.win(ctx, a) {
		if w != nil {
			w.closing()
		}
		resp.Body.Close()
		return nil
	}
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
		x.winner = *a
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

// failed returns err, the failure of attempt a, which may have reached the
// server, marked with retry.Permanent if it may not be retried.
func (x *exchange) failed(a *try, err error) error {
	if !x.mayRetry(false) {
		return a.final(err)
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
// panic goes on (see attempt for a panic in an attempt that lost).
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

// discardPending closes the failure responses not handed over.
func (x *exchange) discardPending() {
	x.mu.Lock()
	x.discardPendingLocked()
	x.mu.Unlock()
}

// discardPendingLocked is discardPending with mu held (closing a body in
// memory does not block).
func (x *exchange) discardPendingLocked() {
	for _, p := range x.pending {
		p.Body.Close()
	}
	clear(x.pending)
	x.pending = x.pending[:0]
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

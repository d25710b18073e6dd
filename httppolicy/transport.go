package httppolicy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/compose"
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
	errNilPolicy  = errors.New("httppolicy: Transport.Policy is nil")
	errNilReq     = errors.New("httppolicy: nil Request")
	errNoRun      = errors.New("httppolicy: the policy returned without sending the request")
	errDone       = errors.New("httppolicy: the exchange is over: a policy called fn again after the response was accepted")
	errConcurrent = errors.New("httppolicy: the policy ran two attempts of a request at once: a Transport sends one at a time; hedge with Hedging around the Transport")
	errHedge      = errors.New("httppolicy: Transport.Policy is a *retry.Hedge; wrap the Transport in a Hedging instead")
	errStopped    = errors.New("httppolicy: the request may not be sent again after a failure that may not be retried")
)

// Transport is an [http.RoundTripper] that sends each request through a
// [policy.Policy], usually a *compose.Pipeline of bulkhead, deadline, retry
// and breaker. It makes one call of Policy.Execute per request. That call
// lasts until the response body is read to its end or closed. The package
// documentation says what is retried, what is a failure and what the
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
	// response without a body). For a text/event-stream response that is
	// not encoded, it waits for the first event that counts (see the
	// package documentation). RoundTrip hands the response over only once
	// that byte is in. A late first byte is the attempt's failure
	// ([ErrFirstByteTimeout]): a breaker counts it, and it is retried when
	// the request may be. Zero means no such timeout; a request may set its
	// own with [WithStreamTimeouts]. It must not be negative.
	FirstByteTimeout time.Duration

	// IdleTimeout, if > 0, bounds how long Reads of a response body handed
	// over wait for data that counts. Its timer runs only while a Read
	// waits, so a slow reader is not a stalled stream. Any byte restarts
	// it. For a text/event-stream response that is not encoded, only a
	// Read that completes an event that counts (or brings more data of an
	// event past 4 KiB) does; the waits of the Reads in between add up.
	// When it fires, that Read fails with [ErrIdleTimeout], and the call
	// ends as a failure: a breaker counts it, and it is never retried.
	// Zero means no such timeout; a request may set its own with
	// [WithStreamTimeouts]. It must not be negative.
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
// would. If req's context is done then, it returns the context's error.
// The response's body holds the policy's resources (a bulkhead slot, the
// deadline's context, the breaker's verdict) until it is read to EOF or
// closed: close it, as net/http requires. If the request's context or a
// timeout of the policy ends the stream, the body's Read fails with the
// error the call ended with (a timeout matches deadline.ErrExceeded).
// With a first byte timeout, RoundTrip returns only once the first byte
// that counts is in. The stream timeouts do not watch the connection of a
// 101 Switching Protocols response. The Policy runs one attempt at a
// time: to hedge, wrap the Transport in a [Hedging]. RoundTrip closes
// req.Body, even on error, and does not modify req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, errNilReq
	}
	st, err := t.check(req.Context())
	if err != nil {
		closeReqBody(req)
		return nil, err
	}
	x := newExchange(t, req, st)
	if x.sus != nil {
		return x.runSync(req.Context())
	}
	x.out = make(chan result, 1)
	go x.run(req.Context())
	r := <-x.out
	if r.panicked {
		if r.panicVal == nil {
			runtime.Goexit() // recover reports nil for nothing else
		}
		panic(r.panicVal)
	}
	return r.resp, r.err
}

// check returns the stream timeouts of a request with context ctx, or the
// error that refuses it.
func (t *Transport) check(ctx context.Context) (streamTimeouts, error) {
	switch t.Policy.(type) {
	case nil:
		return streamTimeouts{}, errNilPolicy
	case *retry.Hedge:
		return streamTimeouts{}, errHedge
	}
	return t.streamTimeoutsOf(ctx)
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
	panicVal any // nil: runtime.Goexit
}

// exchange is one RoundTrip: one Execute of the policy and its attempts,
// one at a time.
type exchange struct {
	t          *Transport
	req        *http.Request
	base       http.RoundTripper
	isFailure  func(*http.Response) bool
	timeouts   streamTimeouts
	hasBody    bool // req has a body to send
	replayable bool // the body, if any, can be sent again
	idempotent bool
	// sus, if not nil, is the policy as a pipeline that holds across a
	// hand-over: it runs on RoundTrip's goroutine (runSync). Otherwise the
	// policy runs on a goroutine of its own (run), which sends RoundTrip's
	// result on out.
	sus holder
	out chan result

	// mu is held by the running attempt, and for good once Execute has
	// returned (over): attempts the policy starts concurrently, or too
	// late, are refused (see enter).
	mu   sync.Mutex
	over atomic.Bool

	bodySent bool           // req.Body was given to the base transport
	stopped  bool           // an attempt failed in a way that may not be retried
	last     *http.Response // the latest attempt's failure response, body in memory
	accepted *http.Response // a success whose body is in memory, returned at the end
	stream   *streamBody    // the body of the response handed over, if any
	handed   *http.Response // the response handed over, with runSync
}

func newExchange(t *Transport, req *http.Request, st streamTimeouts) *exchange {
	x := &exchange{
		t:          t,
		req:        req,
		base:       t.Base,
		isFailure:  t.IsFailure,
		timeouts:   st,
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

// runSync runs the pipeline on RoundTrip's goroutine. A response handed
// over leaves the call held: the body's end, or the end of the attempt's
// context, ends it (see streamBody.hold). A panic or runtime.Goexit goes
// on up RoundTrip's caller once the policies have freed what they held.
func (x *exchange) runSync(ctx context.Context) (*http.Response, error) {
	returned := false
	defer func() {
		if !returned {
			x.close()
			x.cleanUp()
		}
	}()
	held, err := x.sus.Start(ctx, x.attempt)
	returned = true
	x.close()
	if held != nil {
		x.stream.hold(held)
		return x.handed, nil
	}
	r := x.outcome(ctx, err)
	return r.resp, r.err
}

// run runs the policy on a goroutine of its own, so that Execute can
// outlive RoundTrip while the caller reads the body. It sends RoundTrip's
// result on out unless an attempt has handed a response over.
func (x *exchange) run(ctx context.Context) {
	returned := false
	defer func() {
		if !returned {
			x.abort(recover())
		}
	}()
	err := x.t.Policy.Execute(ctx, x.attempt)
	returned = true
	x.close()
	if x.stream == nil {
		x.out <- x.outcome(ctx, err)
		return
	}
	x.stream.setCallErr(err)
	close(x.stream.finished)
}

// abort ends the exchange after Execute panicked with v (nil: it called
// runtime.Goexit); the policies have freed what they held. RoundTrip's
// caller gets the panic if it still waits. Otherwise the panic came from
// a policy's work after the body ended (a hook), and is reported to
// otel.Handle: nobody could recover it here.
func (x *exchange) abort(v any) {
	x.close()
	x.cleanUp()
	if x.stream == nil {
		x.out <- result{panicked: true, panicVal: v}
		return
	}
	defer close(x.stream.finished)
	if v != nil {
		reportPanic(v)
	}
}

// reportPanic reports v, a panic in a policy after the response was
// returned, to otel.Handle.
func reportPanic(v any) {
	otel.Handle(fmt.Errorf("httppolicy: panic in a policy after the response was returned: %v\n\n%s", v, debug.Stack()))
}

// outcome returns what RoundTrip returns when Execute returned err without
// a response handed over, and frees the rest.
func (x *exchange) outcome(ctx context.Context, err error) result {
	defer x.cleanUp()
	if err == nil && x.accepted != nil {
		resp := x.accepted
		x.accepted = nil
		return result{resp: resp}
	}
	// Retries ended on a failure status: the caller gets the response
	// itself, or, if its context is done, that context's error. The
	// StatusError is the policies' view of the response, never the
	// caller's.
	if se, ok := errors.AsType[*StatusError](err); ok {
		if cerr := ctx.Err(); cerr != nil {
			return result{err: cerr}
		}
		if se.Response != nil && se.Response == x.last {
			x.last = nil
			return result{resp: se.Response}
		}
	}
	if err == nil {
		err = errNoRun
	}
	// Without a retry policy to take it off, an attempt's Permanent
	// marker is still on the error: the caller should not see it.
	return result{err: retry.Unmark(err)}
}

// cleanUp closes what the attempts left that the caller does not get, and
// req.Body if no attempt sent it: a RoundTripper must close it.
func (x *exchange) cleanUp() {
	closeResp(x.accepted)
	closeResp(x.last)
	x.accepted, x.last = nil, nil
	if x.hasBody && !x.bodySent {
		x.bodySent = true
		x.req.Body.Close()
	}
}

// enter lets an attempt start, or returns the error it returns at once:
// the policy runs fn while another attempt runs (as a hedge would), or
// after Execute returned.
func (x *exchange) enter(ctx context.Context) error {
	if x.mu.TryLock() {
		return nil
	}
	if !x.over.Load() {
		return retry.Permanent(errConcurrent)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return retry.Permanent(errDone)
}

// close waits for a running attempt to return (a policy should have
// waited for it), and refuses those the policy starts later.
func (x *exchange) close() {
	x.over.Store(true)
	x.mu.Lock()
}

func closeResp(resp *http.Response) {
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
}

func closeReqBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

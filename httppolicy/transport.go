package httppolicy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/policy"
)

// starter is a pipeline that can hand a call over: a *compose.Pipeline,
// or a type that embeds one.
type starter interface {
	Start(ctx context.Context, fn policy.Func) (*compose.Held, error)
}

var (
	errNilPolicy  = errors.New("httppolicy: Transport.Policy is nil")
	errNilReq     = errors.New("httppolicy: nil Request")
	errNoRun      = errors.New("httppolicy: the policy returned without sending the request")
	errDone       = errors.New("httppolicy: the exchange is over: a policy called fn again after the response was accepted")
	errConcurrent = errors.New("httppolicy: the policy ran two attempts of a request at once: a Transport sends one at a time; hedge with Hedging around the Transport")
	errStopped    = errors.New("httppolicy: the request may not be sent again after a failure that may not be retried")
)

// Transport is an [http.RoundTripper] that sends each request through a
// [policy.Policy]. The package documentation says what is retried, what
// is a failure and what the caller gets.
//
// Under a ratelimit.Limiter with a shared quota, a Transport reports the
// token usage of each JSON or event stream response of OpenAI's or
// Anthropic's APIs to ratelimit.ReportUsage as the body is read, so that
// the quota is settled at what the provider counted ("Client side: token
// usage" in the package documentation).
//
// Set the fields before the first request and do not change them later
// ([Transport.SetStreamTimeouts] changes the stream timeouts while it
// runs). A Transport is then safe for concurrent use. The zero value has no
// Policy: its RoundTrip returns an error.
type Transport struct {
	// Base sends each attempt. Nil means [http.DefaultTransport].
	Base http.RoundTripper
	// Policy runs each request. It is required.
	Policy policy.Policy

	// IsFailure reports whether a response is a failure. Nil means
	// [DefaultIsFailure]. It may be called concurrently and must not read
	// or close the body.
	IsFailure func(*http.Response) bool
	// RetryUnsafe lets requests that are not idempotent be retried after
	// any failure.
	RetryUnsafe bool
	// Signals, if not nil, is told of every response an attempt receives.
	Signals Signals
	// PropagatePriority sends the priority of each request's context
	// (policy.PriorityOf) in the [PriorityHeader], in place of any the
	// request holds. A request of the default priority sends none, even if
	// its header had one (copied from an inbound request, say).
	PropagatePriority bool
	// Key, if set, gives each request's key (policy.WithKey) for the
	// policies, from the request as the caller made it: [KeyByHost] keys
	// by host, so that a keyed.Group gives each host its own breaker. An
	// empty key leaves the request's context's. It may be called
	// concurrently.
	Key func(*http.Request) string

	// FirstByteTimeout, if positive, bounds each attempt's wait for the
	// first byte of the response body (for a response without a body, its
	// headers). It must not be negative.
	FirstByteTimeout time.Duration
	// IdleTimeout, if positive, bounds how long Reads of the body handed
	// over wait for data that counts. It must not be negative. In an event
	// stream with a Content-Encoding (one the caller asked for with its own
	// Accept-Encoding), every byte counts: keepalives alone never cut it.
	// Leave Accept-Encoding unset, or ask for identity, where that matters.
	IdleTimeout time.Duration
	// KeepaliveEvents are the event types the stream timeouts do not
	// count. Nil means ["ping"]; an empty slice, none.
	KeepaliveEvents []string
	// StreamEnd, if set, is the event that ends every whole event stream
	// (text/event-stream, not encoded) this Transport hands over, such as
	// &OpenAIStreamEnd: an event dispatched (its blank line read) with
	// data. A stream that reaches its end without it was cut: its last
	// Read returns [ErrStreamCut] in place of io.EOF, and the call ends
	// with that error, a failure for the breaker. A 2xx event stream with
	// no body at all fails its attempt with ErrStreamCut, retried as a
	// failure is. An empty StreamEnd makes RoundTrip fail.
	StreamEnd *StreamEnd

	// Name names the Transport in its errors and telemetry.
	Name string
	// MeterProvider provides the watertight.timeouts counter. Nil means
	// the global MeterProvider.
	MeterProvider metric.MeterProvider

	tel      atomic.Pointer[streamTelemetry]
	wrap     atomic.Pointer[compose.Pipeline] // around a Policy that is no pipeline
	timeouts atomic.Pointer[streamTimeouts]   // set by SetStreamTimeouts
}

// SetStreamTimeouts changes the stream timeouts, FirstByteTimeout and
// IdleTimeout, for the requests that start after it, while requests run:
// a request keeps the timeouts it started with. The fields keep their
// values; the Transport uses these in their place from now on. A
// negative timeout is refused with an error, and changes nothing.
// SetStreamTimeouts is safe for concurrent use.
func (t *Transport) SetStreamTimeouts(firstByte, idle time.Duration) error {
	if err := errors.Join(negative("SetStreamTimeouts: firstByte", firstByte), negative("SetStreamTimeouts: idle", idle)); err != nil {
		return err
	}
	t.timeouts.Store(&streamTimeouts{firstByte, idle})
	return nil
}

// pipeline returns t.Policy if it can hand a call over; else a pipeline
// with t.Policy in a slot, built once, that adds no telemetry of its own.
// Either way, every request runs through one path: Start.
func (t *Transport) pipeline() (starter, error) {
	if s, ok := t.Policy.(starter); ok {
		return s, nil
	}
	// Policy does not change after the first request: no comparison,
	// which would panic on a Policy of an uncomparable type.
	if pipe := t.wrap.Load(); pipe != nil {
		return pipe, nil
	}
	pipe, err := compose.New(cmp.Or(t.Name, "transport"), compose.Policies{Bulkhead: t.Policy},
		compose.WithTracerProvider(tracenoop.NewTracerProvider()), compose.WithMeterProvider(metricnoop.NewMeterProvider()))
	if err != nil {
		return nil, fmt.Errorf("httppolicy: Transport.Policy: %w", err)
	}
	t.wrap.CompareAndSwap(nil, pipe)
	return t.wrap.Load(), nil
}

// RoundTrip sends req through t.Policy, with the outcomes the package
// documentation lists. It closes req.Body, even on error, and does not
// modify req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, errNilReq
	}
	st, err := t.check(req.Context())
	var pipe starter
	if err == nil {
		pipe, err = t.pipeline()
	}
	if err != nil {
		closeReqBody(req)
		return nil, err
	}
	ctx := req.Context()
	if t.Key != nil {
		if k := t.Key(req); k != "" {
			ctx = policy.WithKey(ctx, k)
		}
	}
	return newExchange(t, req, st, pipe).run(ctx)
}

// KeyByHost returns the host of r's URL (with its port, if any), in lower
// case, as host names are: as Transport.Key, it keys each request by the
// host of the URL the caller gave. Under a Base that sends the request
// elsewhere ([Endpoints], watertight.HTTPOptions.Endpoints), that is the
// caller's host, the same whichever endpoint answers: the key is read
// before an endpoint is picked.
func KeyByHost(r *http.Request) string { return strings.ToLower(r.URL.Host) }

// check returns the stream timeouts of a request, or why it is refused.
func (t *Transport) check(ctx context.Context) (streamTimeouts, error) {
	if t.Policy == nil {
		return streamTimeouts{}, errNilPolicy
	}
	err := errors.Join(negative("Transport.FirstByteTimeout", t.FirstByteTimeout),
		negative("Transport.IdleTimeout", t.IdleTimeout), t.StreamEnd.check())
	v, ok := ctx.Value(streamTimeoutsKey{}).(streamTimeouts)
	if !ok {
		if set := t.timeouts.Load(); set != nil {
			return *set, err
		}
		return streamTimeouts{t.FirstByteTimeout, t.IdleTimeout}, err
	}
	return v, errors.Join(err, negative("WithStreamTimeouts: firstByte", v.firstByte),
		negative("WithStreamTimeouts: idle", v.idle))
}

func negative(name string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("httppolicy: %s must be >= 0, got %v", name, d)
	}
	return nil
}

// CloseIdleConnections calls Base's CloseIdleConnections, if it has one.
func (t *Transport) CloseIdleConnections() { closeIdle(t.Base) }

func closeIdle(base http.RoundTripper) {
	if c, ok := cmp.Or(base, http.DefaultTransport).(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// exchange is one RoundTrip.
type exchange struct {
	t          *Transport
	req        *http.Request
	base       http.RoundTripper
	isFailure  func(*http.Response) bool
	timeouts   streamTimeouts
	hasBody    bool
	replayable bool // the body, if any, can be sent again
	idempotent bool
	pipe       starter

	// mu is held by the running attempt, and for good once over.
	mu   sync.Mutex
	over atomic.Bool

	bodySent bool           // req.Body was given to the base transport
	stopped  bool           // an attempt failed in a way that may not be retried
	last     *http.Response // the latest attempt's failure response, body in memory
	accepted *http.Response // a success whose body is in memory
	stream   *streamBody    // the body of the response handed over, if any
	handed   *http.Response // the response handed over
}

func newExchange(t *Transport, req *http.Request, st streamTimeouts, pipe starter) *exchange {
	x := &exchange{
		t:          t,
		req:        req,
		pipe:       pipe,
		base:       cmp.Or(t.Base, http.DefaultTransport),
		isFailure:  t.IsFailure,
		timeouts:   st,
		hasBody:    req.Body != nil && req.Body != http.NoBody,
		idempotent: idempotent(req),
	}
	if x.isFailure == nil {
		x.isFailure = DefaultIsFailure
	}
	x.replayable = !x.hasBody || req.GetBody != nil
	return x
}

// run runs the call through the pipeline on RoundTrip's goroutine.
func (x *exchange) run(ctx context.Context) (*http.Response, error) {
	returned := false
	defer func() {
		if !returned {
			x.close()
			x.cleanUp()
		}
	}()
	held, err := x.pipe.Start(ctx, x.attempt)
	returned = true
	x.close()
	switch {
	case held != nil:
		x.stream.hold(held)
		return x.handed, nil
	case x.stream != nil:
		// The policy returned before its attempt handed the response
		// over (it should have waited): nothing holds the call.
		return x.handed, nil
	}
	return x.outcome(ctx, err)
}

// outcome returns what RoundTrip returns when the call ended with err
// without a hand-over.
func (x *exchange) outcome(ctx context.Context, err error) (*http.Response, error) {
	defer x.cleanUp()
	if err == nil && x.accepted != nil {
		resp := x.accepted
		x.accepted = nil
		return resp, nil
	}
	if se, ok := errors.AsType[*StatusError](err); ok {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		if se.Response != nil && se.Response == x.last {
			x.last = nil
			return se.Response, nil
		}
	}
	// Without a retry policy, an attempt's marker is still on the error.
	return nil, policy.Unmark(cmp.Or(err, errNoRun))
}

// cleanUp closes what the caller does not get, and req.Body if no attempt
// sent it.
func (x *exchange) cleanUp() {
	closeResp(x.accepted)
	closeResp(x.last)
	x.accepted, x.last = nil, nil
	if x.hasBody && !x.bodySent {
		x.bodySent = true
		x.req.Body.Close()
	}
}

// enter lets an attempt start, or returns why not.
func (x *exchange) enter(ctx context.Context) error {
	if x.mu.TryLock() {
		return nil
	}
	if !x.over.Load() {
		return policy.Permanent(errConcurrent)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return policy.Permanent(errDone)
}

// close waits for a running attempt to return, and refuses later ones.
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

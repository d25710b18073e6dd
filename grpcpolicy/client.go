package grpcpolicy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/policy"
)

// ClientConfig configures a [Client]. It is read once by [NewClient] and
// may be reused. At least one of Policy and Methods must be set.
type ClientConfig struct {
	// Policy runs every call that Methods gives no policy of its own,
	// usually a *compose.Pipeline or *watertight.Pipeline for the
	// dependency behind the connection. Nil: such calls pass through
	// unguarded.
	Policy policy.Policy

	// Methods gives a policy of its own to the methods it names, keyed by
	// full method name ("/pkg.Service/Method") or by service
	// ("/pkg.Service"); a method's own entry wins over its service's. A
	// slow method with a bulkhead of its own fills only that bulkhead.
	Methods map[string]policy.Policy

	// Classify decides how a failed call's status is treated: a failure
	// (breaker), a retryable failure, or the caller's own error. Nil means
	// [DefaultClassify]. The end of an attempt's context (an attempt
	// deadline) is classified as DEADLINE_EXCEEDED. The stream timeouts
	// are not classified: a first-message timeout is Retryable, an idle
	// timeout a Failure.
	// A Retryable verdict is treated as Failure when the server's pushback
	// says stop (gRFC A6). It may be called concurrently.
	Classify func(code codes.Code, pb Pushback) Verdict

	// FirstMessageTimeout bounds, for a stream, the time from its opening
	// until its first response message arrives. Zero means no bound; it
	// must not be negative. When it fires, the stream's context is
	// canceled with a *StreamTimeoutError as its cause, and the call ends
	// with that error.
	FirstMessageTimeout time.Duration

	// IdleTimeout bounds, for a stream, each wait of RecvMsg for the next
	// message after the first: time the caller spends between RecvMsg
	// calls does not count. Zero means no bound; it must not be negative.
	// It fires like FirstMessageTimeout.
	IdleTimeout time.Duration

	// Name names the Client in the telemetry of its stream timeouts
	// (watertight.policy.name). Empty is allowed.
	Name string

	// MeterProvider provides the watertight.timeouts counter, to which the
	// stream timeouts add. Nil means the global MeterProvider.
	MeterProvider metric.MeterProvider

	// PropagatePriority sends the priority of each call's context
	// (policy.PriorityOf) to the server, in the [PriorityKey] metadata, in
	// place of any the outgoing metadata holds. A call of the default
	// priority sends none, even if that metadata had one.
	PropagatePriority bool
}

// Client holds the interceptors that run a gRPC client's calls through
// watertight policies. Build one with [NewClient]; the zero Client is not
// usable. A Client is immutable and safe for concurrent use.
type Client struct {
	routes    routes
	classify  func(codes.Code, Pushback) Verdict
	propagate bool
	first     *StreamTimeoutError // nil: no FirstMessageTimeout
	idle      *StreamTimeoutError // nil: no IdleTimeout
}

// NewClient returns a Client configured by cfg, or an error naming the
// first invalid field. It never panics.
func NewClient(cfg ClientConfig) (*Client, error) {
	r, err := newRoutes("ClientConfig", cfg.Policy, cfg.Methods)
	if err != nil {
		return nil, err
	}
	if cfg.FirstMessageTimeout < 0 {
		return nil, fmt.Errorf("grpcpolicy: ClientConfig.FirstMessageTimeout must be >= 0, got %v", cfg.FirstMessageTimeout)
	}
	if cfg.IdleTimeout < 0 {
		return nil, fmt.Errorf("grpcpolicy: ClientConfig.IdleTimeout must be >= 0, got %v", cfg.IdleTimeout)
	}
	c := &Client{routes: r, classify: cfg.Classify, propagate: cfg.PropagatePriority}
	if c.classify == nil {
		c.classify = DefaultClassify
	}
	if cfg.FirstMessageTimeout > 0 || cfg.IdleTimeout > 0 {
		counter := timeoutCounter(cfg.MeterProvider)
		if cfg.FirstMessageTimeout > 0 {
			c.first = newStreamTimeout(KindFirstMessage, cfg.FirstMessageTimeout, cfg.Name, counter)
		}
		if cfg.IdleTimeout > 0 {
			c.idle = newStreamTimeout(KindIdle, cfg.IdleTimeout, cfg.Name, counter)
		}
	}
	return c, nil
}

// DialOptions returns the options that install the Client's interceptors
// on a grpc.ClientConn, with grpc.WithDisableRetry. That option turns off
// the retries a service config's retryPolicy asks grpc-go for, so that
// attempts do not multiply. grpc-go's transparent retries, of calls that
// never reached the server, stay on, inside one of the policy's attempts.
func (c *Client) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(c.UnaryInterceptor()),
		grpc.WithChainStreamInterceptor(c.StreamInterceptor()),
		grpc.WithDisableRetry(),
	}
}

// UnaryInterceptor returns the interceptor that runs each unary call
// through its method's policy: one Policy.Execute per call, one invoker
// call per attempt. The caller gets nil on success. If the last attempt's
// status was classified CallerError, it gets grpc-go's status unchanged.
// Otherwise it gets the policy's error, which keeps the last attempt's
// status or has one of its own: UNAVAILABLE for a rejection,
// DEADLINE_EXCEEDED for a timeout, CANCELLED for the caller's
// cancellation.
func (c *Client) UnaryInterceptor() grpc.UnaryClientInterceptor {
	return c.unary
}

func (c *Client) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if c.propagate {
		ctx = outgoingPriority(ctx)
	}
	p := c.routes.lookup(method)
	if p == nil {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	u := unaryCalls.Get().(*unaryCall)
	u.c, u.method, u.req, u.reply, u.cc, u.invoker = c, method, req, reply, cc, invoker
	// The trailer carries the server's pushback: the caller's options and
	// ours, in a slice of the call's own (the caller's is never written).
	u.opts = append(append(u.opts[:0], opts...), u.trailerOpt)
	err := p.Execute(ctx, u.fn)
	// A policy that runs attempts concurrently (a hedge) may return before
	// an attempt it canceled has: wait for it, so that nothing writes the
	// caller's reply, or u, once the call has returned.
	u.waitIdle()
	answer := u.answer
	u.release()
	if err != nil {
		return callerError(policy.Unmark(err))
	}
	return answer
}

// unaryCalls recycles the state of unary calls, so that a call through the
// interceptor allocates nothing of its own: the bound attempt function and
// the Trailer option are made once per unaryCall. A policy must not keep
// fn after Execute returns (package policy's contract), so a unaryCall is
// free for the next call once Execute has; after a panic it is dropped.
var unaryCalls = sync.Pool{New: func() any {
	u := new(unaryCall)
	u.fn = u.attempt
	u.trailerOpt = grpc.Trailer(&u.trailer)
	return u
}}

// release clears what the call referred to and recycles u.
func (u *unaryCall) release() {
	clear(u.opts)
	u.c, u.method, u.req, u.reply, u.cc, u.invoker = nil, "", nil, nil, nil, nil
	u.opts, u.trailer, u.answer = u.opts[:0], nil, nil
	unaryCalls.Put(u)
}

// unaryCall is one unary call through the policy; attempts run one after
// another, on the caller's goroutine.
type unaryCall struct {
	c       *Client
	method  string
	req     any
	reply   any
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker
	opts    []grpc.CallOption
	trailer metadata.MD
	answer  error // the caller's own error status of the last attempt

	fn         policy.Func     // u.attempt, bound once
	trailerOpt grpc.CallOption // grpc.Trailer(&u.trailer), made once

	// One attempt at a time: the invoker writes the caller's reply, which
	// two attempts cannot share. state is idle, running, or running with
	// waitIdle waiting on idle.
	state atomic.Int32
	idle  chan struct{}
}

// States of unaryCall.state.
const (
	callIdle int32 = iota
	callRunning
	callWaited // running, and waitIdle waits for it
)

// errConcurrent is what an attempt returns when its policy starts it while
// another attempt of the same call runs.
var errConcurrent = errors.New("grpcpolicy: the policy ran two attempts of a call at once (a hedge): not supported, since they would write the same reply")

// enter marks an attempt as running, or returns false if one already is.
func (u *unaryCall) enter() bool { return u.state.CompareAndSwap(callIdle, callRunning) }

// exit marks the attempt as over, and wakes waitIdle.
func (u *unaryCall) exit() {
	if u.state.Swap(callIdle) == callWaited {
		close(u.idle)
	}
}

// waitIdle returns once no attempt runs. It is called after Execute has
// returned, when no attempt may start any more.
func (u *unaryCall) waitIdle() {
	if u.state.Load() == callIdle {
		return
	}
	// Written before the CompareAndSwap that publishes it to exit.
	u.idle = make(chan struct{})
	if u.state.CompareAndSwap(callRunning, callWaited) {
		<-u.idle
	}
	u.idle = nil
}

func (u *unaryCall) attempt(ctx context.Context) error {
	if !u.enter() {
		return policy.Permanent(errConcurrent)
	}
	defer u.exit()
	u.trailer = nil
	u.answer = nil
	err := u.invoker(ctx, u.method, u.req, u.reply, u.cc, u.opts...)
	if err == nil {
		return nil
	}
	ferr, v := u.c.failure(ctx, err, u.trailer, true)
	if v == CallerError {
		u.answer = err
		return nil
	}
	return ferr
}

// failure classifies err, the error an attempt with context ctx ended
// with, trailer being the call's trailer. It returns the error the attempt
// reports to the policy, marked with policy.Permanent unless it may be
// retried (only if mayRetry), and the verdict it went by: Retryable only
// if the error is not marked, CallerError (and a nil error) if the status
// is the caller's own (the attempt is then a success for the policy).
func (c *Client) failure(ctx context.Context, err error, trailer metadata.MD, mayRetry bool) (error, Verdict) {
	if status.Code(err) == codes.DeadlineExceeded {
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			// Our deadline has passed, and the server (which got it in
			// grpc-timeout) may have answered before our timer ran: it is
			// our deadline all the same, and ctx is done at once.
			<-ctx.Done()
		}
	}
	if ctx.Err() != nil {
		// The attempt's context ended: an attempt deadline, a stream
		// timeout or the caller's cancellation. The attempt ends with the
		// context's error (a stream timeout: its own), which a deadline
		// policy above makes its own.
		cerr := ctx.Err()
		if te, ok := errors.AsType[*StreamTimeoutError](context.Cause(ctx)); ok {
			// A stream timeout. The first message's, as httppolicy's first
			// byte timeout, is retried while nothing has reached the
			// caller; an idle timeout comes after a message, and never is.
			if mayRetry && te.Kind == KindFirstMessage {
				return te, Retryable
			}
			return policy.Permanent(te), Failure
		}
		if mayRetry && errors.Is(cerr, context.DeadlineExceeded) && c.classify(codes.DeadlineExceeded, Pushback{}) == Retryable {
			return cerr, Retryable
		}
		return policy.Permanent(cerr), Failure
	}
	code := status.Code(err)
	pb := ParsePushback(trailer)
	switch c.classify(code, pb) {
	case CallerError:
		return nil, CallerError
	case Retryable:
		se := &StatusError{Err: err, Code: code, Pushback: pb}
		if mayRetry && !pb.Stop {
			return se, Retryable
		}
		return policy.Permanent(se), Failure
	default:
		return policy.Permanent(&StatusError{Err: err, Code: code, Pushback: pb}), Failure
	}
}

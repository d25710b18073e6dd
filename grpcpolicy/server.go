package grpcpolicy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// DefaultPushback is the wait a [Server] asks a rejected client for when
// ServerConfig.Pushback is zero.
const DefaultPushback = time.Second

var errHandlerRan = errors.New("grpcpolicy: the handler has already run: a policy called fn twice")

// ServerConfig configures a [Server]. It is read once by [NewServer] and
// may be reused. At least one of Policy and Methods must be set.
type ServerConfig struct {
	// Policy runs every call that Methods gives no policy of its own.
	// Nil: such calls pass through unguarded.
	Policy policy.Policy

	// Methods gives a policy of its own to the methods it names, keyed by
	// full method name ("/pkg.Service/Method") or by service
	// ("/pkg.Service"); a method's own entry wins over its service's. A
	// slow method with a bulkhead of its own fills only that bulkhead, and
	// sheds only its own load.
	Methods map[string]policy.Policy

	// RejectCode is the status a rejected call gets: codes.Unavailable (the
	// default, for the zero value codes.OK) or codes.ResourceExhausted; any
	// other code is invalid. See the package documentation for the choice.
	RejectCode codes.Code

	// Pushback is the wait a rejected client is asked for, in the
	// grpc-retry-pushback-ms trailer (gRFC A6), rounded up to whole
	// milliseconds. Zero means [DefaultPushback]; negative sends -1, which
	// asks clients not to retry at all.
	Pushback time.Duration

	// IsFailure reports whether a handler's status is a failure of the
	// server, which the policy sees as an error (a breaker counts it).
	// Nil means [DefaultServerIsFailure]. Other statuses are the
	// caller's own: a success for the policy. It may be called
	// concurrently.
	IsFailure func(codes.Code) bool
}

// DefaultServerIsFailure is the classification a [Server] uses when
// ServerConfig.IsFailure is nil: UNKNOWN (a handler's plain error),
// INTERNAL, UNAVAILABLE, DATA_LOSS and DEADLINE_EXCEEDED are failures of
// the server, as a 5xx is over HTTP. It is safe for concurrent use.
func DefaultServerIsFailure(code codes.Code) bool {
	switch code {
	case codes.Unknown, codes.Internal, codes.Unavailable, codes.DataLoss, codes.DeadlineExceeded:
		return true
	}
	return false
}

// Server holds the interceptors that run a gRPC server's calls through
// watertight policies and shed the load they reject. Build one with
// [NewServer]; the zero Server is not usable. A Server is immutable and
// safe for concurrent use.
type Server struct {
	routes    routes
	isFailure func(codes.Code) bool
	rejectErr error       // the status error a rejection is answered with
	trailer   metadata.MD // the pushback trailer, shared read-only
}

// NewServer returns a Server configured by cfg, or an error naming the
// first invalid field. It never panics.
func NewServer(cfg ServerConfig) (*Server, error) {
	r, err := newRoutes("ServerConfig", cfg.Policy, cfg.Methods)
	if err != nil {
		return nil, err
	}
	code := cfg.RejectCode
	switch code {
	case codes.OK:
		code = codes.Unavailable
	case codes.Unavailable, codes.ResourceExhausted:
	default:
		return nil, fmt.Errorf("grpcpolicy: ServerConfig.RejectCode must be Unavailable or ResourceExhausted, got %v", code)
	}
	s := &Server{routes: r, isFailure: cfg.IsFailure}
	if s.isFailure == nil {
		s.isFailure = DefaultServerIsFailure
	}
	s.rejectErr = status.Error(code, "grpcpolicy: the server is overloaded; retry later")
	s.trailer = metadata.Pairs(PushbackKey, pushbackValue(cfg.Pushback))
	return s, nil
}

// pushbackValue renders d as the trailer's milliseconds, rounded up.
func pushbackValue(d time.Duration) string {
	switch {
	case d < 0:
		return "-1"
	case d == 0:
		d = DefaultPushback
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return strconv.FormatInt(ms, 10)
}

// ServerOptions returns the options that install the Server's
// interceptors on a grpc.Server.
func (s *Server) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(s.StreamInterceptor()),
	}
}

// UnaryInterceptor returns the interceptor that runs each unary call's
// handler through its method's policy, with the call's context replaced by
// the one Execute gives (a Deadline bounds the handler). The outcomes:
//
//	outcome                                        the client gets
//	the handler ran                                what it returned (a failure status is one for the policy)
//	rejected (errors.Is policy.ErrRejected)        RejectCode at once, with the pushback trailer; the handler never runs
//	deadline.ErrExceeded, the handler's error      DEADLINE_EXCEEDED
//	  has no status
//	the caller's cancellation before the handler   CANCELLED
//	the policy failed otherwise before it ran      UNAVAILABLE
//
// The handler runs at most once: its failures are marked with
// retry.Permanent. A panic in the handler frees the policy's hold and
// goes on to grpc-go.
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return s.unary
}

func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p := s.routes.lookup(info.FullMethod)
	if p == nil {
		return handler(ctx, req)
	}
	c := &unaryServerCall{Context: ctx, s: s, req: req, handler: handler}
	err := p.Execute(c, runUnaryServerCall)
	// A policy that runs attempts concurrently (a hedge) may return while
	// the handler still runs (its second attempt was refused): wait for it,
	// so that its result is read whole and nothing runs after the RPC.
	c.running.Wait()
	if c.state.CompareAndSwap(callFree, callClosed) {
		// The handler never ran, and now never will (a policy that
		// returned nil without running fn gets UNAVAILABLE too).
		return nil, s.notRun(ctx, err, func(md metadata.MD) { grpc.SetTrailer(ctx, md) })
	}
	if err == nil {
		return c.resp, c.err
	}
	return c.resp, s.ranErr(err, c.err)
}

// unaryServerCall is one unary call through the policy. It is also the
// context the interceptor gives Execute (the RPC's own, which it embeds,
// with itself as a value), so that the policy.Func, runUnaryServerCall, is
// a plain function that finds the call in its context: the call is the
// interceptor's one allocation, where a bound method value would be a
// second. It is not recycled (the client's calls are, through a
// sync.Pool): a hedge may start fn on its own goroutine after Execute has
// returned, and such a late attempt must find the call it belongs to, not
// a later call's state. Telling a late attempt from a current one in a
// recycled call would need the attempt's context to be canceled in time,
// which package policy's contract does not promise for every context a
// policy derives; one allocation is the price of not relying on it.
type unaryServerCall struct {
	context.Context
	s       *Server
	req     any
	handler grpc.UnaryHandler
	state   atomic.Int32   // callFree, callRan or callClosed: the handler runs once, and never after the RPC
	running sync.WaitGroup // the handler, while it runs
	resp    any
	err     error
}

// States of a server call: free until the handler is claimed (callRan) or
// the interceptor has given up waiting for it (callClosed).
const (
	callFree int32 = iota
	callRan
	callClosed
)

// unaryCallKey is the context key under which a unaryServerCall finds
// itself.
type unaryCallKey struct{}

// Value returns c for unaryCallKey, and the RPC context's value otherwise.
func (c *unaryServerCall) Value(key any) any {
	if key == (unaryCallKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// errNoCall is what the attempt returns when its policy called it with a
// context not derived from the one Execute got (package policy's
// contract forbids it).
var errNoCall = errors.New("grpcpolicy: the policy called fn with a context not derived from Execute's")

// runUnaryServerCall is the policy.Func of a unary call: it runs the
// handler of the unaryServerCall in ctx.
func runUnaryServerCall(ctx context.Context) error {
	c, _ := ctx.Value(unaryCallKey{}).(*unaryServerCall)
	if c == nil {
		return retry.Permanent(errNoCall)
	}
	// Counted before the claim, so that once a hedge's Execute returns
	// (its other attempts refused) the Wait after it sees the handler.
	c.running.Add(1)
	defer c.running.Done()
	if !c.state.CompareAndSwap(callFree, callRan) {
		return retry.Permanent(errHandlerRan)
	}
	c.resp, c.err = c.handler(ctx, c.req)
	return c.s.outcome(ctx, c.err)
}

// outcome is what the policy sees of a handler that returned herr: a
// failure status, or the end of ctx, is an error, marked as permanent
// (the handler never runs twice).
func (s *Server) outcome(ctx context.Context, herr error) error {
	if herr == nil {
		return nil
	}
	if s.isFailure(status.Code(herr)) {
		return retry.Permanent(herr)
	}
	if err := ctx.Err(); err != nil {
		return retry.Permanent(err)
	}
	return nil
}

// ranErr is the error the client gets when the handler ran and returned
// herr and the policy returned err.
func (s *Server) ranErr(err, herr error) error {
	if herr != nil {
		if _, ok := status.FromError(herr); ok {
			return herr
		}
	}
	if errors.Is(err, deadline.ErrExceeded) {
		return status.Error(codes.DeadlineExceeded, "grpcpolicy: deadline exceeded")
	}
	if herr != nil {
		return herr
	}
	return status.Error(codes.Internal, "grpcpolicy: the policy failed after the handler returned")
}

// notRun is the error the client gets when the policy returned err without
// running the handler; setTrailer sets the call's trailer.
func (s *Server) notRun(ctx context.Context, err error, setTrailer func(metadata.MD)) error {
	switch {
	case errors.Is(err, policy.ErrRejected):
		setTrailer(s.trailer)
		return s.rejectErr
	case errors.Is(err, deadline.ErrExceeded), errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "grpcpolicy: deadline exceeded before the handler ran")
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Unavailable, "grpcpolicy: the call could not be served")
}

// StreamInterceptor returns the interceptor that runs each stream's
// handler through its method's policy, as UnaryInterceptor does for unary
// calls: the handler gets a stream whose Context is the one Execute gives,
// and holds its slot until it returns.
func (s *Server) StreamInterceptor() grpc.StreamServerInterceptor {
	return s.stream
}

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	p := s.routes.lookup(info.FullMethod)
	if p == nil {
		return handler(srv, ss)
	}
	c := &streamServerCall{s: s, srv: srv, ss: ss, handler: handler}
	ctx := ss.Context()
	err := p.Execute(ctx, c.run)
	c.running.Wait() // as in unary: the handler may outlive a hedge's Execute
	if c.state.CompareAndSwap(callFree, callClosed) {
		return s.notRun(ctx, err, ss.SetTrailer) // as in unary
	}
	if err == nil {
		return c.err
	}
	return s.ranErr(err, c.err)
}

type streamServerCall struct {
	s       *Server
	srv     any
	ss      grpc.ServerStream
	handler grpc.StreamHandler
	state   atomic.Int32 // as unaryServerCall's
	running sync.WaitGroup
	err     error
}

func (c *streamServerCall) run(ctx context.Context) error {
	// Counted before the claim, so that once a hedge's Execute returns
	// (its other attempts refused) the Wait after it sees the handler.
	c.running.Add(1)
	defer c.running.Done()
	if !c.state.CompareAndSwap(callFree, callRan) {
		return retry.Permanent(errHandlerRan)
	}
	c.err = c.handler(c.srv, &serverStream{ServerStream: c.ss, ctx: ctx})
	return c.s.outcome(ctx, c.err)
}

// serverStream is the stream a handler gets: the server's, with the
// policy's context.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }

package grpcpolicy

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/policy"
)

// DefaultPushback is the wait a [Server] asks a rejected client for when
// ServerConfig.Pushback is zero.
const DefaultPushback = time.Second

var (
	errHandlerRan      = errors.New("grpcpolicy: the handler has already run: a policy called fn twice")
	errHandlerPanicked = errors.New("grpcpolicy: the handler panicked")
	errHandlerGoexit   = errors.New("grpcpolicy: the handler called runtime.Goexit")
)

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

	// Priority gives a call's priority (policy.Priority) from its context
	// (the authenticated peer, say) and full method name. The policies and
	// the handler see it in the context. Nil: a call keeps the priority its
	// context carries (policy.PriorityDefault if none), unless
	// TrustPriority applies. It may be called concurrently. A value that is
	// none of the three priorities counts as policy.PriorityDefault.
	Priority func(ctx context.Context, fullMethod string) policy.Priority

	// TrustPriority reports whether the client of a call may set its own
	// priority, in the [PriorityKey] metadata. When it returns true and the
	// client sent a known priority, that priority wins over Priority's.
	// Nil trusts no client: a client cannot raise its own priority. It may
	// be called concurrently.
	TrustPriority func(ctx context.Context, fullMethod string) bool

	// Key gives a call's key (policy.WithKey: whom the call is made for)
	// from its context and full method name: an authenticated tenant,
	// taken from what the peer proved (its certificate, a verified
	// token), not from metadata it merely sends unless the peer is
	// trusted. A keyed.Group, or a bulkhead with a fair share, reads it.
	// Nil, or an empty key: a call keeps the key its context carries. It
	// may be called concurrently.
	Key func(ctx context.Context, fullMethod string) string
}

// DefaultServerIsFailure is the classification a [Server] uses when
// ServerConfig.IsFailure is nil. UNKNOWN (a handler's plain error),
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
	priority  func(context.Context, string) policy.Priority
	trust     func(context.Context, string) bool
	key       func(context.Context, string) string
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
	s := &Server{routes: r, isFailure: cfg.IsFailure, priority: cfg.Priority, trust: cfg.TrustPriority, key: cfg.Key}
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
// handler through its method's policy, with the context Execute gives. The
// outcomes:
//
//	outcome                                        the client gets
//	the handler ran                                what it returned (a failure status is one for the policy)
//	rejected (errors.Is policy.ErrRejected)        RejectCode at once, with the pushback trailer; the handler never runs
//	policy.ErrTimeout, the handler's error         DEADLINE_EXCEEDED
//	  has no status
//	the caller's cancellation before the handler   CANCELLED
//	the policy failed otherwise before it ran      UNAVAILABLE
//
// The handler runs at most once: its failures are marked with
// policy.Permanent. A panic (or runtime.Goexit) in the handler is caught in
// the policy's attempt, which returns a permanent failure: the policy
// frees its hold and a breaker counts it. The interceptor then raises the
// panic (or Goexit) again on its own goroutine, even when a hedging policy
// ran the handler on another goroutine. A recovery interceptor installed
// before this one recovers it.
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return s.unary
}

func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx = s.withPriority(ctx, info.FullMethod)
	p := s.routes.lookup(info.FullMethod)
	if p == nil {
		return handler(ctx, req)
	}
	c := &unaryServerCall{Context: ctx, s: s, req: req, handler: handler}
	err := p.Execute(c, runUnaryServerCall)
	if c.close() {
		// The handler never ran, and now never will (a policy that
		// returned nil without running fn gets UNAVAILABLE too).
		return nil, s.notRun(ctx, err, func(md metadata.MD) { grpc.SetTrailer(ctx, md) })
	}
	// A policy that runs attempts concurrently (a hedge) may return while
	// the handler still runs (the caller canceled): wait for it, so that
	// its result is read whole and nothing runs after the RPC.
	c.wait()
	c.raise()
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
	handlerRun
	s       *Server
	req     any
	handler grpc.UnaryHandler
	resp    any
	err     error
}

// handlerRun is what a server call's interceptor and the attempts of its
// policy share: who runs the handler (at most one attempt, and none once
// the interceptor has returned), and how it ended. The attempt that
// claims the run writes the call's results, then ends the run; the
// interceptor reads them only once the run has ended (state runDone, or
// wake closed), which orders the writes before the reads.
type handlerRun struct {
	state    atomic.Int32  // runFree, runRunning, runWaited, runDone or runClosed
	wake     chan struct{} // made by the interceptor before it moves the state to runWaited; closed by the run's end
	panicked bool          // the handler panicked, with pval
	goexit   bool          // the handler called runtime.Goexit
	pval     any
}

// States of a server call's handlerRun: free until an attempt claims the
// handler (runRunning) or the interceptor closes the call (runClosed),
// which it does as soon as Execute returns, so that a late attempt of a
// hedge finds it closed and runs nothing. A handler that outlives Execute
// is waited for: the interceptor moves runRunning to runWaited and
// sleeps on wake; the handler's end moves runRunning to runDone, or
// finding runWaited, closes wake.
const (
	runFree int32 = iota
	runRunning
	runWaited
	runDone
	runClosed
)

// claim reports whether the calling attempt is the one to run the
// handler.
func (r *handlerRun) claim() bool { return r.state.CompareAndSwap(runFree, runRunning) }

// close closes a call whose handler was never claimed, and reports
// whether it did. Called once, by the interceptor, after Execute.
func (r *handlerRun) close() bool { return r.state.CompareAndSwap(runFree, runClosed) }

// caught records v, a value recover returned in the attempt, if it is a
// panic's (nil is a Goexit's, or no panic).
func (r *handlerRun) caught(v any) {
	if v != nil {
		r.panicked, r.pval = true, v
	}
}

// end ends a claimed run: normal says whether the handler returned. It is
// deferred by the claiming attempt, so it runs through a Goexit.
func (r *handlerRun) end(normal bool) {
	if !normal && !r.panicked {
		r.goexit = true
	}
	if !r.state.CompareAndSwap(runRunning, runDone) {
		close(r.wake) // runWaited: the interceptor sleeps on it
	}
}

// failure is what the claiming attempt returns to the policy when the
// handler did not return: a permanent failure (the handler never runs
// twice), nil if it returned.
func (r *handlerRun) failure() error {
	switch {
	case r.panicked:
		return policy.Permanent(errHandlerPanicked)
	case r.goexit:
		return policy.Permanent(errHandlerGoexit)
	}
	return nil
}

// wait returns once the claimed run has ended. The channel is made only
// when the handler outlives Execute, which only a policy that runs fn on
// a goroutine of its own (a hedge) can cause.
func (r *handlerRun) wait() {
	if r.state.Load() == runDone {
		return
	}
	r.wake = make(chan struct{})
	if r.state.CompareAndSwap(runRunning, runWaited) {
		<-r.wake
	}
}

// raise raises again, on the interceptor's goroutine, the panic or Goexit
// the handler ended by. Called after wait.
func (r *handlerRun) raise() {
	switch {
	case r.panicked:
		panic(r.pval)
	case r.goexit:
		runtime.Goexit()
	}
}

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
		return policy.Permanent(errNoCall)
	}
	if !c.claim() {
		return policy.Permanent(errHandlerRan)
	}
	// Two defers, as singleflight has, to tell a panic from runtime.Goexit:
	// the inner one recovers a panic, the outer one sees a Goexit (the
	// handler neither returned nor panicked).
	// The panic is the interceptor's to raise: on a hedge's goroutine,
	// after Execute has returned, nothing could recover it.
	normal := false
	defer func() { c.end(normal) }()
	func() {
		defer func() {
			if !normal {
				c.caught(recover())
			}
		}()
		c.resp, c.err = c.handler(ctx, c.req)
		normal = true
	}()
	if err := c.failure(); err != nil {
		return err
	}
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
		return policy.Permanent(herr)
	}
	if err := ctx.Err(); err != nil {
		return policy.Permanent(err)
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
	if errors.Is(err, policy.ErrTimeout) {
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
	case errors.Is(err, policy.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "grpcpolicy: deadline exceeded before the handler ran")
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Unavailable, "grpcpolicy: the call could not be served")
}

// StreamInterceptor returns the interceptor that runs each stream's
// handler through its method's policy, as UnaryInterceptor does. The
// handler's stream has the Context Execute gives, and holds its slot
// until the handler returns.
func (s *Server) StreamInterceptor() grpc.StreamServerInterceptor {
	return s.stream
}

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := s.withPriority(ss.Context(), info.FullMethod)
	p := s.routes.lookup(info.FullMethod)
	if p == nil {
		return handler(srv, &serverStream{ServerStream: ss, ctx: ctx})
	}
	c := &streamServerCall{s: s, srv: srv, ss: ss, handler: handler}
	err := p.Execute(ctx, c.run)
	if c.close() {
		return s.notRun(ctx, err, ss.SetTrailer) // as in unary
	}
	c.wait() // as in unary: the handler may outlive a hedge's Execute
	c.raise()
	if err == nil {
		return c.err
	}
	return s.ranErr(err, c.err)
}

// streamServerCall is one stream through the policy; its run is the
// policy.Func.
type streamServerCall struct {
	handlerRun
	s       *Server
	srv     any
	ss      grpc.ServerStream
	handler grpc.StreamHandler
	err     error
}

// run is the policy.Func of a stream, as runUnaryServerCall is a unary
// call's.
func (c *streamServerCall) run(ctx context.Context) error {
	if !c.claim() {
		return policy.Permanent(errHandlerRan)
	}
	normal := false // as in runUnaryServerCall
	defer func() { c.end(normal) }()
	func() {
		defer func() {
			if !normal {
				c.caught(recover())
			}
		}()
		c.err = c.handler(c.srv, &serverStream{ServerStream: c.ss, ctx: ctx})
		normal = true
	}()
	if err := c.failure(); err != nil {
		return err
	}
	return c.s.outcome(ctx, c.err)
}

// serverStream is the stream a handler gets: the server's, with the
// policy's context.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }

package grpcpolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/watertight/watertight/policy"
)

// MaxReplay is the number of messages a client stream keeps, while no
// message has reached the caller, to send again on a retried stream. A
// stream whose caller sends more before receiving anything is not
// retried.
const MaxReplay = 64

var (
	errCommitted  = errors.New("grpcpolicy: the stream is committed: a policy called fn again after a message reached the caller")
	errNoStream   = errors.New("grpcpolicy: the policy returned without opening the stream")
	errAttemptEnd = errors.New("grpcpolicy: the attempt is over")
	errGoexit     = errors.New("grpcpolicy: runtime.Goexit in a policy")
)

// StreamInterceptor returns the interceptor that runs each client stream
// through its method's policy: one Policy.Execute per stream, which lasts
// until the stream ends. Until then the stream holds its bulkhead slot, its
// deadline's context and its breaker's verdict. The stream ends when
// RecvMsg returns io.EOF (a success) or an error (classified as for unary
// calls), or when the caller's context or a policy timeout ends it. When
// RecvMsg returns io.EOF or an error, the policy has already returned.
//
// A stream that failed with a Retryable status is retried while nothing
// has reached the caller: no message, no header, no error from SendMsg,
// and at most [MaxReplay] messages sent. The retry opens a new stream and
// sends the messages again, CloseSend too. The caller sees one stream.
//
// As with grpc-go, a caller must end every stream: read until RecvMsg
// returns an error or io.EOF, or cancel its context. A stream abandoned
// otherwise holds its slot and a goroutine until its context ends.
//
// A panic or runtime.Goexit under the policy (in the streamer, or in a
// policy) frees what the policy holds. Before the stream reaches the
// caller, it goes on on the caller's goroutine. After, nothing can recover
// it. The stream then ends with an UNKNOWN error ("grpcpolicy: panic in a
// policy: <value>" or "grpcpolicy: runtime.Goexit in a policy"), which is
// reported to otel.Handle.
func (c *Client) StreamInterceptor() grpc.StreamClientInterceptor {
	return c.stream
}

func (c *Client) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if c.propagate {
		ctx = outgoingPriority(ctx)
	}
	p := c.routes.lookup(method)
	if p == nil {
		return streamer(ctx, desc, cc, method, opts...)
	}
	w := &clientStream{
		c: c, p: p, desc: desc, cc: cc, method: method, streamer: streamer, opts: opts,
		out:      make(chan handover, 1),
		finished: make(chan struct{}),
	}
	go w.run(ctx)
	h := <-w.out
	switch {
	case h.panicked:
		panic(h.panicVal)
	case h.goexit:
		// The policy's goroutine ended by runtime.Goexit (t.FailNow in a
		// test's streamer, say): so does the caller's, as it would have
		// had the stream opened on it.
		runtime.Goexit()
	}
	if h.err != nil {
		return nil, h.err
	}
	return w, nil
}

// handover is what the interceptor's caller gets: the stream is ready (err
// nil), or the call ended before it was.
type handover struct {
	err      error
	panicked bool
	panicVal any
	goexit   bool // the policy's goroutine ended by runtime.Goexit
}

// clientStream is the stream the caller gets. It stands for every attempt
// of the call: RecvMsg, SendMsg and the others go to the current one.
type clientStream struct {
	c        *Client
	p        policy.Policy
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption

	out      chan handover // 1-buffered: exactly one send
	handed   bool          // used by the goroutine of run only
	finished chan struct{} // closed once Execute has returned
	final    error         // Execute's error for the caller; read after finished
	answer   error         // the caller's own status that ended the call before a stream opened

	// sendMu serialises SendMsg and CloseSend with the replay of a new
	// attempt, so that no message is sent to an attempt being replaced
	// and missed by its successor.
	sendMu     sync.Mutex
	sent       []any // messages to replay; nil once committed
	closedSend bool

	mu        sync.Mutex
	cur       *attemptStream
	committed bool // something reached the caller: never retry
	running   bool // an attempt runs: a second one at once is refused
}

// attemptStream is one attempt's grpc stream.
type attemptStream struct {
	grpc.ClientStream
	ctx    context.Context // the stream's context
	cancel context.CancelCauseFunc

	outcome  chan error // 1-buffered: how the caller saw the stream end
	reported atomic.Bool
	replaced chan struct{} // closed when the next attempt's stream is published

	first    *time.Timer // FirstMessageTimeout, nil if none
	idle     *time.Timer // IdleTimeout, armed by RecvMsg after the first message
	gotFirst bool        // used by RecvMsg only

	retiring bool // under clientStream.mu: the attempt is being retried
}

// run executes the policy on its own goroutine, so that Execute (and the
// bulkhead slot, the deadline's context) outlive the interceptor while the
// caller uses the stream.
func (w *clientStream) run(ctx context.Context) {
	// Two defers, as singleflight does, to tell a panic from
	// runtime.Goexit: the inner one recovers a panic, the outer one sees a
	// Goexit (Execute neither returned nor panicked). Since Go 1.21 a
	// panic(nil) recovers as a *runtime.PanicNilError, never as nil.
	finished, recovered := false, false
	var pval any
	defer func() {
		if finished {
			return
		}
		// A panic or runtime.Goexit in a policy (or in the streamer or a
		// hook it calls): the policies have freed what they held. Hand it
		// to the interceptor's caller if it still waits; otherwise
		// re-raising a panic here, where nobody can recover it, would kill
		// the process: report it to otel.Handle.
		goexit := !recovered
		if goexit {
			w.final = callerError(errGoexit)
		} else {
			w.final = callerError(fmt.Errorf("grpcpolicy: panic in a policy: %v", pval))
		}
		w.mu.Lock()
		if w.cur != nil {
			w.cur.cancel(errAttemptEnd)
		}
		w.mu.Unlock()
		close(w.finished)
		if !w.handed {
			w.handed = true
			w.out <- handover{panicked: !goexit, goexit: goexit, panicVal: pval}
			return
		}
		if goexit {
			otel.Handle(fmt.Errorf("%w after the stream was returned", errGoexit))
		} else {
			otel.Handle(fmt.Errorf("grpcpolicy: panic in a policy after the stream was returned: %v", pval))
		}
	}()
	var err error
	func() {
		defer func() {
			if !finished {
				pval = recover()
				recovered = pval != nil
			}
		}()
		err = w.p.Execute(ctx, w.attempt)
		finished = true
	}()
	if !finished {
		return // a panic, recovered: the deferred call hands it on
	}
	if err != nil {
		w.final = callerError(policy.Unmark(err))
	}
	close(w.finished)
	if !w.handed {
		w.handed = true
		switch {
		case err != nil:
			err = w.final
		case w.answer != nil:
			err = w.answer
		default:
			err = callerError(errNoStream)
		}
		w.out <- handover{err: err}
	}
}

// attempt is the policy.Func: it opens a stream, sends again what the
// caller has sent so far, hands it over, and waits until the stream ends.
func (w *clientStream) attempt(ctx context.Context) error {
	w.mu.Lock()
	committed, running := w.committed, w.running
	w.running = true
	w.mu.Unlock()
	if running {
		// A policy that runs attempts concurrently (a hedge): one stream
		// cannot be two.
		return policy.Permanent(errConcurrent)
	}
	defer func() {
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
	}()
	if committed {
		return policy.Permanent(errCommitted)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(errAttemptEnd)
	s, err := w.streamer(sctx, w.desc, w.cc, w.method, w.opts...)
	if err != nil {
		ferr, v := w.c.failure(sctx, err, nil, true)
		if v == CallerError {
			// The caller's own error, before any stream: the call is a
			// success for the policy, and the caller gets the status.
			w.answer = err
			return nil
		}
		return ferr
	}
	a := &attemptStream{
		ClientStream: s,
		ctx:          sctx,
		cancel:       cancel,
		outcome:      make(chan error, 1),
		replaced:     make(chan struct{}),
	}
	if w.c.first != nil {
		te := w.c.first
		a.first = time.AfterFunc(te.Duration, func() { te.fire(sctx, cancel) })
		defer a.first.Stop()
	}

	w.sendMu.Lock()
	w.mu.Lock()
	sent := w.sent // SendMsg appends under both locks; a commit clears it under mu
	w.mu.Unlock()
	for _, m := range sent {
		// A failure here shows in RecvMsg, as for the caller's own sends.
		if s.SendMsg(m) != nil {
			break
		}
	}
	if w.closedSend {
		s.CloseSend()
	}
	w.mu.Lock()
	prev := w.cur
	w.cur = a
	w.mu.Unlock()
	w.sendMu.Unlock()
	if prev != nil {
		close(prev.replaced)
	}
	if !w.handed {
		w.handed = true
		w.out <- handover{}
	}

	select {
	case err := <-a.outcome:
		if err == nil || sctx.Err() == nil {
			return err
		}
		// The context ended the stream as the caller saw it end.
		return w.endedByContext(a, sctx)
	case <-sctx.Done():
		return w.endedByContext(a, sctx)
	}
}

// endedByContext is what an attempt returns when its stream's context
// ended: a timeout of the stream, an attempt deadline, the caller's
// cancellation. It may be retried only if nothing has reached the caller.
func (w *clientStream) endedByContext(a *attemptStream, sctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err, v := w.c.failure(sctx, sctx.Err(), nil, !w.committed)
	if v == Retryable {
		a.retiring = true
	}
	return err
}

// current returns the current attempt.
func (w *clientStream) current() *attemptStream {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

// report tells the attempt how its stream ended (nil: a success) and waits
// for what follows: a new attempt (true) or the end of the call (false).
func (w *clientStream) report(a *attemptStream, err error) (retried bool) {
	if a.reported.CompareAndSwap(false, true) {
		a.outcome <- err
	}
	select {
	case <-a.replaced:
		return true
	case <-w.finished:
		return false
	}
}

// RecvMsg receives the next message of the current attempt. At io.EOF or an
// error, the call ends: the error is what the call ended with, returned
// once the policy has (the slot is free). A Retryable failure before
// anything reached the caller is retried without the caller seeing it.
func (w *clientStream) RecvMsg(m any) error {
	for {
		a := w.current()
		if a.gotFirst && w.c.idle != nil {
			te := w.c.idle
			if a.idle == nil {
				a.idle = time.AfterFunc(te.Duration, func() { te.fire(a.ctx, a.cancel) })
			} else {
				a.idle.Reset(te.Duration)
			}
		}
		err := a.ClientStream.RecvMsg(m)
		if a.idle != nil {
			a.idle.Stop()
		}
		if err == nil {
			if !a.gotFirst {
				a.gotFirst = true
				if a.first != nil {
					a.first.Stop()
				}
			}
			w.mu.Lock()
			retiring := a.retiring
			if !retiring {
				w.committed = true
			}
			w.mu.Unlock()
			if retiring {
				// The attempt is being retried: this message belongs to
				// a stream the caller never sees.
				if w.report(a, nil) {
					continue
				}
				return w.endErr(io.EOF)
			}
			if !w.desc.ServerStreams {
				// The one response: grpc-go has read the status too, and
				// the stream is over.
				w.report(a, nil)
			}
			return nil
		}
		if err == io.EOF {
			if w.report(a, nil) {
				continue // a retry was under way: read the new stream
			}
			return w.endErr(io.EOF)
		}
		if a.ctx.Err() != nil {
			// The context ended the stream: the attempt decides.
			if w.report(a, err) {
				continue
			}
			return w.endErr(err)
		}
		w.mu.Lock()
		ferr, v := w.c.failure(a.ctx, err, a.ClientStream.Trailer(), !w.committed)
		if v == Retryable {
			a.retiring = true
		}
		w.mu.Unlock()
		if v == CallerError {
			w.report(a, nil)
			return w.endErr(err)
		}
		if w.report(a, ferr) {
			continue
		}
		return w.endErr(err)
	}
}

// endErr returns the error the caller gets at the end of the call, seen
// as err: the policy's error if it failed, err otherwise.
func (w *clientStream) endErr(err error) error {
	<-w.finished
	if w.final != nil {
		return w.final
	}
	if w.answer != nil {
		return w.answer // a retried stream's opening failed so
	}
	return err
}

// SendMsg sends m on the current attempt, keeping it to send again on a
// retried stream while nothing has reached the caller. An error commits the
// stream: the caller sees it, so it is never retried. As with grpc-go, m
// must not be modified after SendMsg returns.
func (w *clientStream) SendMsg(m any) error {
	var a *attemptStream
	for {
		w.sendMu.Lock()
		w.mu.Lock()
		a = w.cur
		if !a.retiring {
			break
		}
		// The attempt is being retried: send on the next one, if any.
		w.mu.Unlock()
		w.sendMu.Unlock()
		select {
		case <-a.replaced:
			continue
		case <-w.finished:
			return io.EOF
		}
	}
	if !w.committed {
		if len(w.sent) < MaxReplay {
			w.sent = append(w.sent, m)
		} else {
			w.commitLocked()
		}
	}
	w.mu.Unlock()
	err := a.ClientStream.SendMsg(m)
	w.sendMu.Unlock()
	if err == nil {
		return nil
	}
	w.mu.Lock()
	retiring := a.retiring
	if !retiring {
		w.commitLocked()
	}
	w.mu.Unlock()
	if retiring {
		// m is kept: the next attempt sends it, if there is one.
		select {
		case <-a.replaced:
			return nil
		case <-w.finished:
		}
	}
	return err
}

// commitLocked marks the stream as never to be retried; w.mu is held.
func (w *clientStream) commitLocked() {
	w.committed = true
	w.sent = nil
}

// CloseSend closes the sending side of the current attempt, and of any
// retried one.
func (w *clientStream) CloseSend() error {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	w.closedSend = true
	return w.current().ClientStream.CloseSend()
}

// Header returns the current attempt's header metadata. Once it has, the
// stream is never retried.
func (w *clientStream) Header() (metadata.MD, error) {
	a := w.current()
	md, err := a.ClientStream.Header()
	if err == nil {
		w.mu.Lock()
		if !a.retiring {
			w.committed = true
			w.sent = nil
		}
		w.mu.Unlock()
	}
	return md, err
}

// Trailer returns the current attempt's trailer metadata.
func (w *clientStream) Trailer() metadata.MD { return w.current().ClientStream.Trailer() }

// Context returns the current attempt's stream context.
func (w *clientStream) Context() context.Context { return w.current().ClientStream.Context() }

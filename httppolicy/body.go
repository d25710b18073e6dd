package httppolicy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"sync/atomic"

	"go.opentelemetry.io/otel"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// streamBody is the body of a response handed over. Its end (EOF, a read
// error, Close) ends the held call. The final Read or Close returns only
// once the policies have judged it.
type streamBody struct {
	rc       io.ReadCloser
	prefix   []byte          // read ahead while waiting for the first byte
	w        *streamWatch    // the attempt's stream timers, if any
	ctx      context.Context // the attempt's context
	ended    atomic.Bool
	closed   atomic.Bool
	finished chan struct{} // closed once the held call has ended

	held *compose.Held // the held pipeline call
	stop func() bool   // stops ending held with ctx

	// Read's own: whether the first byte that counts (of an event, for an
	// event stream) has been read and marked, and the event stream's
	// scanner, which also looks for its StreamEnd.
	first bool
	sse   *sseScanner
	usage usageReader // reads the body's usage for a shared quota, if any

	// Written before finished is closed.
	byCtx   bool  // ctx ended the stream
	callErr error // the error the call ended with
}

// Read reads from the response body. A read error caused by the end of
// the attempt's context is replaced by the error the call ended with.
func (b *streamBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	if len(b.prefix) > 0 {
		n := copy(p, b.prefix)
		b.prefix = b.prefix[n:]
		if b.sse != nil {
			b.sse.scan(p[:n]) // for its StreamEnd: the prefix holds the first byte
		}
		if b.usage != nil {
			b.usage.feed(p[:n])
		}
		return n, nil
	}
	n, err := b.w.read(b.rc, p)
	counts := n > 0
	if b.sse != nil {
		counts = b.sse.scan(p[:n]) > 0 // every Read: the StreamEnd may come
	}
	if b.usage != nil {
		b.usage.feed(p[:n]) // before the end below: the attempt settles there
	}
	if counts && !b.first {
		b.first = true
		stage.FirstByte(b.ctx)
	}
	if err == io.EOF && b.sse.cut() {
		err = ErrStreamCut
	}
	if err == io.EOF || (err != nil && b.closed.Load()) {
		// A Read failed by a concurrent Close is the caller's choice.
		b.end(nil)
	} else if err != nil {
		b.end(err) // returns once finished is closed: callErr is set
		if b.callErr != nil {
			err = b.callErr
		}
	}
	return n, err
}

// Close closes the response body and ends the call as a success.
func (b *streamBody) Close() error {
	b.closed.Store(true) // before the close that fails a waiting Read
	b.w.closing()
	err := b.rc.Close()
	b.end(nil)
	return err
}

// end ends the stream with err (nil: EOF or Close), unless it has ended,
// and returns once the held call has ended.
func (b *streamBody) end(err error) {
	if b.ended.CompareAndSwap(false, true) {
		if b.held == nil { // nothing holds the call: see exchange.run
			b.w.end()
			close(b.finished)
		} else {
			b.stop()
			b.resume(b.attemptErr(err, false))
		}
	}
	<-b.finished
}

// hold makes the end of the body, or of ctx, end the held call h.
func (b *streamBody) hold(h *compose.Held) {
	b.held = h
	b.stop = context.AfterFunc(b.ctx, func() {
		if b.ended.CompareAndSwap(false, true) {
			b.resume(b.attemptErr(nil, true))
		}
	})
}

// resume ends the held call with the attempt's error err. A panic in a
// policy hook is reported to otel.Handle: the caller has the response.
func (b *streamBody) resume(err error) {
	defer close(b.finished)
	defer func() {
		if v := recover(); v != nil {
			otel.Handle(fmt.Errorf("httppolicy: panic in a policy after the response was returned: %v\n\n%s", v, debug.Stack()))
		}
	}()
	b.w.end()
	// The final Read returns the call's error if ctx ended the stream.
	if err := b.held.End(err); b.byCtx && err != nil {
		b.callErr = policy.Unmark(err)
	}
}

// attemptErr returns what the attempt returns when the stream ends with
// err (nil: EOF or Close), or, if byCtx, when the attempt's context ends.
// A failure is marked with policy.Permanent: the caller has the response.
func (b *streamBody) attemptErr(err error, byCtx bool) error {
	switch {
	case byCtx || (err != nil && b.ctx.Err() != nil):
		b.byCtx = true
		return policy.Permanent(b.ctx.Err())
	case err != nil:
		return policy.Permanent(err)
	}
	return nil
}

// bufferBody replaces resp's body by its first MaxFailureBody bytes,
// unless it is in memory.
func bufferBody(resp *http.Response) {
	if _, ok := resp.Body.(memBody); ok {
		return
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		resp.Body = http.NoBody
		return
	}
	buf, err := io.ReadAll(io.LimitReader(resp.Body, MaxFailureBody+1))
	if err == nil && len(buf) > MaxFailureBody {
		buf, err = buf[:MaxFailureBody], ErrBodyTruncated
	}
	resp.Body.Close()
	resp.Body = memBody{bytes.NewReader(buf), err}
}

// memBody is a body held in memory, ending with err (nil: io.EOF).
type memBody struct {
	*bytes.Reader
	err error
}

func (b memBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF && b.err != nil {
		err = b.err
	}
	return n, err
}

func (memBody) Close() error { return nil }

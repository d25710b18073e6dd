package httppolicy

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/retry"
)

// streamBody is the body of a response handed over. Its end (EOF, a read
// error, Close) ends the attempt, which stays open until then, and the
// caller's final Read or Close returns only once Execute's work is done:
// the bulkhead slot is free and the breaker has counted.
//
// When the attempt's context ends the stream (a Deadline, an Attempt
// timeout, the caller's cancellation), net/http's read error says neither
// which policy fired nor that one did. The error the call ended with
// does: a Read that fails then returns it instead, as RoundTrip would
// have before the headers.
type streamBody struct {
	rc       io.ReadCloser
	prefix   []byte          // read ahead while waiting for the first byte: read first
	w        *streamWatch    // the attempt's stream timers, if any
	ctx      context.Context // the attempt's context
	ended    atomic.Bool
	closed   atomic.Bool   // Close was called
	finished chan struct{} // closed once Execute's work is done

	// Execute on a goroutine of its own: the stream's outcome goes to the
	// attempt waiting in handOver (1-buffered, sent once).
	done chan error
	// A held pipeline call: the body's end, or the end of ctx, ends it
	// (see hold). stop stops the latter.
	held *compose.Held
	stop func() bool

	// Written before finished is closed, read after: byCtx says that
	// ctx ended the stream, callErr is the error the call ended with then.
	byCtx   bool
	callErr error
}

// Read reads from the response body. At EOF the call ends as a success; a
// read error ends it as a failure. A read error caused by the end of the
// attempt's context is replaced by the error the call ended with.
func (b *streamBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		// Bytes read ahead are the body's too: none is served after
		// Close, as with net/http's own body.
		return 0, http.ErrBodyReadAfterClose
	}
	if len(b.prefix) > 0 {
		n := copy(p, b.prefix)
		b.prefix = b.prefix[n:]
		return n, nil
	}
	var n int
	var err error
	if b.w != nil {
		n, err = b.w.read(b.rc, p)
	} else {
		n, err = b.rc.Read(p)
	}
	if err == io.EOF || (err != nil && b.closed.Load()) {
		// The end, or a Read failed by the caller's Close from another
		// goroutine: the caller's choice, not the dependency's failure.
		b.end(nil)
	} else if err != nil {
		b.end(err) // returns once finished is closed: callErr is set
		if b.callErr != nil {
			err = b.callErr
		}
	}
	return n, err
}

// Close closes the response body and ends the call; closing before EOF is
// the caller's choice, not a failure of the dependency.
func (b *streamBody) Close() error {
	b.closed.Store(true) // before the close that fails a waiting Read
	if b.w != nil {
		// An idle timer firing now, during a Read that the close is about
		// to fail, is no timeout.
		b.w.closing()
	}
	err := b.rc.Close()
	b.end(nil)
	return err
}

// end ends the stream with err (nil: EOF or Close), unless it has ended,
// and returns once Execute's work is done.
func (b *streamBody) end(err error) {
	if b.ended.CompareAndSwap(false, true) {
		if b.held == nil {
			b.done <- err
		} else {
			b.stop()
			b.resume(b.attemptErr(err, false))
		}
	}
	<-b.finished
}

// hold makes the end of the body, or of the attempt's context, read or
// not, end the held call h.
func (b *streamBody) hold(h *compose.Held) {
	b.held = h
	b.stop = context.AfterFunc(b.ctx, func() {
		if b.ended.CompareAndSwap(false, true) {
			b.resume(b.attemptErr(nil, true))
		}
	})
}

// resume ends the held call with the attempt's error err, on the
// goroutine that ended the stream. A panic in a policy's work (a hook) is
// reported to otel.Handle: the caller has the response.
func (b *streamBody) resume(err error) {
	defer close(b.finished)
	defer func() {
		if v := recover(); v != nil {
			reportPanic(v)
		}
	}()
	if b.w != nil {
		b.w.end()
	}
	b.setCallErr(b.held.End(err))
}

// attemptErr returns what the attempt returns when the stream ends with
// err (nil: EOF or Close), or, if byCtx, when the attempt's context ends.
// Nothing is retried once the caller has the response: a failure is
// marked with retry.Permanent. It is called once.
func (b *streamBody) attemptErr(err error, byCtx bool) error {
	switch {
	case byCtx || (err != nil && b.ctx.Err() != nil):
		b.byCtx = true
		return retry.Permanent(b.ctx.Err())
	case err != nil:
		return retry.Permanent(err)
	}
	return nil
}

// setCallErr records err, the error the call ended with, for the final
// Read, if the context ended the stream. The attempt's marker is taken
// off (see retry.Unmark): a retry of the caller's own sees the error as
// RoundTrip's caller does. A policy that turned the error into nil leaves
// the read error as it is.
func (b *streamBody) setCallErr(err error) {
	if b.byCtx && err != nil {
		b.callErr = retry.Unmark(err)
	}
}

// switchedBody is the body of a 101 Switching Protocols response, which
// net/http makes writable: the connection, in both directions.
type switchedBody struct {
	*streamBody
	w io.Writer
}

func (b *switchedBody) Write(p []byte) (int, error) { return b.w.Write(p) }

// bufferBody reads up to MaxFailureBody bytes of resp's body into memory,
// closes the original and replaces it with the bytes read.
func bufferBody(resp *http.Response) {
	if resp.Body == nil || resp.Body == http.NoBody {
		resp.Body = http.NoBody
		return
	}
	buf, err := io.ReadAll(io.LimitReader(resp.Body, MaxFailureBody+1))
	if err == nil && len(buf) > MaxFailureBody {
		buf, err = buf[:MaxFailureBody], ErrBodyTruncated
	}
	resp.Body.Close()
	resp.Body = &memBody{b: buf, err: err}
}

// memBody is a body held in memory, ending with err (nil: io.EOF).
type memBody struct {
	b   []byte
	err error
}

func (b *memBody) Read(p []byte) (int, error) {
	if len(b.b) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		return 0, io.EOF
	}
	n := copy(p, b.b)
	b.b = b.b[n:]
	return n, nil
}

func (b *memBody) Close() error { return nil }

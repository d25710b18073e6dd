package httppolicy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/watertight/watertight/retry"
)

// streamBody is the body of an accepted response. It tells the attempt
// waiting in the policy's Execute when the stream has ended (or, for a
// suspended call, resumes it: see exchange.resume), and makes the
// caller's final Read or Close wait until Execute has returned, so that
// when they return the bulkhead slot is free and the breaker has counted
// the outcome.
//
// When the attempt's context ends the stream (a Deadline, an Attempt
// timeout, the caller's cancellation), the read error net/http gives is the
// context's error or its cause, which says neither which policy fired nor
// that one did (the cause a deadline.Deadline sets matches
// context.DeadlineExceeded but not deadline.ErrExceeded). The error
// Execute returned does: a Read that fails then returns that instead, the
// error RoundTrip would have returned had the context ended before the
// headers.
type streamBody struct {
	rc       io.ReadCloser
	prefix   []byte       // read ahead while waiting for the first byte: read first
	w        *streamWatch // the idle timer, if any
	ended    atomic.Bool
	closed   atomic.Bool // Close was called
	done     chan error  // 1-buffered: the stream's outcome, sent once; nil with x
	finished <-chan struct{}
	// x, if not nil, is the exchange whose call the response's handing
	// over suspended: the body's end resumes it, on the goroutine that
	// ends the body, instead of telling the attempt waiting in send.
	x *exchange

	// Written by run or resume before finished is closed, and
	// read only after it is (the close orders them): marked is what the
	// attempt returned when the context ended the stream (nil if it did
	// not), ctxErr the context's error it marked, and callErr the error
	// Execute returned then.
	marked, ctxErr, callErr error
}

// Read reads from the response body. At EOF the call ends as a success; a
// read error ends it as a failure. A read error caused by the end of the
// attempt's context is replaced by the error the call ended with.
func (b *streamBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		// Bytes read ahead while waiting for the first byte are the
		// body's too: none is served after Close, as net/http's own body.
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
		// The end, or a Read that fails because the caller closed the
		// body (from another goroutine, while this Read waited): the
		// caller's choice, not the dependency's failure.
		b.end(nil)
	} else if err != nil {
		b.end(err) // returns once finished is closed: callErr is set
		if b.callErr != nil {
			err = b.callErr
		}
	}
	return n, err
}

// endedByContext is what the attempt returns when ctx ended the stream:
// ctx's error, marked with retry.Permanent (nothing is retried once the
// caller has the response).
func (b *streamBody) endedByContext(ctx context.Context) error {
	b.ctxErr = ctx.Err()
	b.marked = retry.Permanent(b.ctxErr)
	return b.marked
}

// setCallErr records err, the error Execute returned, for the final Read,
// if the context ended the stream. The attempt's marker is taken off (or,
// wrapped by a policy's error such as a deadline's, settled: see
// retry.Unmark), so the caller's own retry around the request and the
// reading of its body sees the error as any other, as RoundTrip's caller
// does. A policy that turned the error into nil leaves the read error as
// it is.
func (b *streamBody) setCallErr(err error) {
	if b.marked == nil || err == nil {
		return
	}
	b.callErr = retry.Unmark(err)
}

// Close closes the response body and ends the call; closing before EOF is
// the caller's choice, not a failure of the dependency.
func (b *streamBody) Close() error {
	b.closed.Store(true) // before the close that fails a waiting Read
	if b.w != nil {
		// The caller ends the stream: an idle timer firing now, during a
		// Read that the close is about to fail, is no timeout.
		b.w.closing()
	}
	err := b.rc.Close()
	b.end(nil)
	return err
}

func (b *streamBody) end(err error) {
	if b.ended.CompareAndSwap(false, true) {
		if b.x != nil {
			b.x.resume(err, false)
		} else {
			b.done <- err
		}
	}
	<-b.finished
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
	resp.Body = &memBody{r: bytes.NewReader(buf), err: err}
}

// memBody is a body held in memory, ending with err (nil: io.EOF).
type memBody struct {
	r   *bytes.Reader
	err error
}

func (b *memBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF && b.err != nil {
		err = b.err
	}
	return n, err
}

func (b *memBody) Close() error { return nil }

// prefixBody is a body read whole into memory while the Transport waited
// for its first byte.
type prefixBody struct{ b []byte }

func (b *prefixBody) Read(p []byte) (int, error) {
	if len(b.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.b)
	b.b = b.b[n:]
	return n, nil
}

func (b *prefixBody) Close() error { return nil }

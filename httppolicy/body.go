package httppolicy

import (
	"bytes"
	"io"
	"net/http"
	"sync/atomic"
)

// streamBody is the body of an accepted response. It tells the attempt
// waiting in the policy's Execute when the stream has ended, and makes the
// caller's final Read or Close wait until Execute has returned, so that
// when they return the bulkhead slot is free and the breaker has counted
// the outcome.
type streamBody struct {
	rc       io.ReadCloser
	ended    atomic.Bool
	done     chan error // 1-buffered: the stream's outcome, sent once
	finished <-chan struct{}
}

// Read reads from the response body. At EOF the call ends as a success; a
// read error ends it as a failure.
func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.end(nil)
	} else if err != nil {
		b.end(err)
	}
	return n, err
}

// Close closes the response body and ends the call; closing before EOF is
// the caller's choice, not a failure of the dependency.
func (b *streamBody) Close() error {
	err := b.rc.Close()
	b.end(nil)
	return err
}

func (b *streamBody) end(err error) {
	if b.ended.CompareAndSwap(false, true) {
		b.done <- err
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

package httppolicy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// step is one chunk of a fed body: data sent after a delay.
type step struct {
	after time.Duration
	data  string
}

// feedBody is a response body fed by a goroutine of the test, with no
// network, so that it runs inside synctest bubbles. Like net/http's body,
// its Read waits for data and fails when the request's context ends, or
// when the body is closed. It returns ctx.Err() (plain context.Canceled,
// as net/http did before it returned causes), so that the tests show the
// Transport does not rely on the base returning the cause.
type feedBody struct {
	ctx     context.Context
	chunks  chan string
	closed  chan struct{}
	once    sync.Once
	pending string
	isClose atomic.Bool
}

func (b *feedBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err // the exchange was aborted
	}
	if b.isClose.Load() {
		return 0, errors.New("read on closed body")
	}
	if b.pending == "" {
		select {
		case c, ok := <-b.chunks:
			if !ok {
				return 0, io.EOF
			}
			b.pending = c
		case <-b.ctx.Done():
			return 0, b.ctx.Err()
		case <-b.closed:
			return 0, errors.New("read on closed body")
		}
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	if b.pending == "" {
		// The end, if it is already known, comes with the last data, as
		// net/http gives it for a body of known length.
		select {
		case c, ok := <-b.chunks:
			if !ok {
				return n, io.EOF
			}
			b.pending = c
		default:
		}
	}
	return n, nil
}

func (b *feedBody) Close() error {
	b.isClose.Store(true)
	b.once.Do(func() { close(b.closed) })
	return nil
}

// fedResponse returns a response to req with Content-Type ct whose body
// sends the steps, then ends (hang false) or sends nothing more until the
// request's context ends or the body is closed (hang true).
func fedResponse(req *http.Request, code int, ct string, hang bool, steps ...step) (*http.Response, *feedBody) {
	b := &feedBody{ctx: req.Context(), chunks: make(chan string, len(steps)+1), closed: make(chan struct{})}
	// What is due at once is there before the headers are returned.
	for len(steps) > 0 && steps[0].after == 0 {
		b.chunks <- steps[0].data
		steps = steps[1:]
	}
	if len(steps) == 0 && !hang {
		close(b.chunks)
		steps = nil
	}
	go func() {
		for _, s := range steps {
			if s.after > 0 {
				t := time.NewTimer(s.after)
				select {
				case <-t.C:
				case <-b.ctx.Done():
					t.Stop()
					return
				case <-b.closed:
					t.Stop()
					return
				}
			}
			b.chunks <- s.data // buffered: never blocks
		}
		if !hang && steps != nil {
			close(b.chunks)
		}
	}()
	h := http.Header{}
	if ct != "" {
		h.Set("Content-Type", ct)
	}
	return &http.Response{
		StatusCode: code, Status: http.StatusText(code), Header: h, Body: b,
		ContentLength: -1, ProtoMajor: 1, ProtoMinor: 1, Request: req,
	}, b
}

// waitHeaders blocks like a server that never answers: until the request's
// context ends, whose error it returns.
func waitHeaders(req *http.Request) (*http.Response, error) {
	<-req.Context().Done()
	return nil, req.Context().Err()
}

// feedBase is a base RoundTripper run by a function, which counts its
// requests and keeps the bodies it made.
type feedBase struct {
	mu     sync.Mutex
	n      int
	bodies []*feedBody
	fn     func(n int, req *http.Request) (*http.Response, *feedBody, error)
}

func (f *feedBase) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.n++
	n := f.n
	f.mu.Unlock()
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	resp, b, err := f.fn(n, req)
	if b != nil {
		f.mu.Lock()
		f.bodies = append(f.bodies, b)
		f.mu.Unlock()
	}
	return resp, err
}

func (f *feedBase) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// allClosed reports whether every body the base made was closed.
func (f *feedBase) allClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.bodies {
		if !b.isClose.Load() {
			return false
		}
	}
	return true
}

// Event streams in both keepalive styles.
const (
	commentPing   = ": ping\n\n"
	anthropicPing = "event: ping\ndata: {\"type\": \"ping\"}\n\n"
	openaiChunk   = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"
	anthropicText = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n"
)

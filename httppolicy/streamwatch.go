package httppolicy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// maxPrefix bounds the keepalives, and the event being read, before the
// first byte that counts. The first read takes prefixChunk bytes, or a
// whole body of known length up to maxExactPrefix: it may bring its EOF.
const (
	maxPrefix      = 1 << 20
	prefixChunk    = 512
	maxExactPrefix = 64 << 10
)

var (
	errTooManyKeepalives = errors.New("httppolicy: more than 1 MiB of keepalives before the first event")
	errEventTooLong      = errors.New("httppolicy: more than 1 MiB in the event being read, before the first event")
)

// States of a streamWatch. A timer fires only if it moves the state
// first.
const (
	watchFirstByte int32 = iota // waiting for the first byte that counts
	watchStreaming              // the first byte is in: only the idle timer may fire
	watchFired                  // a timer fired and canceled the attempt
	watchOver                   // the attempt has ended
)

// streamWatch runs the stream timers of one attempt. A timer cancels ctx
// with a *streamTimeoutError as its cause. Its methods but cause and start
// are no-ops on a nil *streamWatch.
type streamWatch struct {
	t        *Transport
	parent   context.Context // the attempt's context
	ctx      context.Context // parent's child, sent with the request
	cancel   context.CancelCauseFunc
	state    atomic.Int32
	recorded atomic.Bool // the timeout has been recorded

	firstByte, idle time.Duration
	fbTimer         *time.Timer // nil without a first byte timeout
	idleTimer       *time.Timer // nil until the body is handed over with an idle timeout

	sse      *sseScanner   // for an event stream that is not encoded
	idleLeft time.Duration // of the idle timeout, while only keepalives come
}

// newStreamWatch returns the watch of an attempt, its first byte timer
// armed.
func newStreamWatch(t *Transport, parent context.Context, st streamTimeouts) *streamWatch {
	w := &streamWatch{t: t, parent: parent, firstByte: st.firstByte, idle: st.idle}
	w.ctx, w.cancel = context.WithCancelCause(parent)
	if w.firstByte > 0 {
		w.fbTimer = time.AfterFunc(w.firstByte, func() { w.fire(watchFirstByte, ErrFirstByteTimeout, w.firstByte) })
	}
	return w
}

// fire cancels the attempt with a timeout error if the watch is still in
// state from and the attempt's own context is live.
func (w *streamWatch) fire(from int32, sentinel error, d time.Duration) {
	if w.parent.Err() != nil || !w.state.CompareAndSwap(from, watchFired) {
		return
	}
	w.cancel(&streamTimeoutError{sentinel: sentinel, name: w.t.Name, timeout: d})
}

// timedOut returns the timeout error the attempt was canceled with, else
// err. The first call that finds it records the timeout.
func (w *streamWatch) timedOut(err error) error {
	if w == nil {
		return err
	}
	te, ok := context.Cause(w.ctx).(*streamTimeoutError)
	if !ok {
		return err
	}
	if w.recorded.CompareAndSwap(false, true) {
		w.t.telemetry()[te.sentinel].Record(w.parent)
	}
	return te
}

// cause returns the error that canceled the attempt.
func (w *streamWatch) cause() error { return w.timedOut(context.Cause(w.ctx)) }

// firstByteIn disarms the first byte timer. It reports false if the
// timer fired first.
func (w *streamWatch) firstByteIn() bool {
	if w == nil {
		return true
	}
	if w.state.CompareAndSwap(watchFirstByte, watchStreaming) {
		stopTimer(w.fbTimer)
		return true
	}
	return w.state.Load() != watchFired
}

// end ends the watch with its attempt: no timer fires after it.
func (w *streamWatch) end() {
	if w == nil {
		return
	}
	w.state.Store(watchOver)
	stopTimer(w.fbTimer)
	stopTimer(w.idleTimer)
	w.cancel(context.Canceled)
}

// closing disarms the idle timer as the caller closes the body.
func (w *streamWatch) closing() {
	if w != nil && w.state.CompareAndSwap(watchStreaming, watchOver) {
		stopTimer(w.idleTimer)
	}
}

func stopTimer(t *time.Timer) {
	if t != nil {
		t.Stop()
	}
}

// counts reports whether the chunk p brought data that counts.
func (w *streamWatch) counts(p []byte) bool {
	if w.sse != nil {
		return w.sse.scan(p) > 0 || w.sse.largeRead
	}
	return len(p) > 0
}

// start watches resp's body. With a first byte timeout, it returns the
// bytes read until the first that counts, and whether they are the whole
// body. resp's body is closed then, and on error.
func (w *streamWatch) start(resp *http.Response) (prefix []byte, whole bool, err error) {
	if isEventStream(resp.Header) {
		w.sse = newSSEScanner(w.t.keepalives())
	}
	if w.firstByte <= 0 {
		w.firstByteIn()
	} else if prefix, whole, err = w.readFirst(resp.Body, resp.ContentLength); err != nil || whole {
		resp.Body.Close()
		return prefix, whole, err
	}
	if w.idle > 0 {
		w.idleLeft = w.idle
		w.idleTimer = time.AfterFunc(time.Hour, func() { w.fire(watchStreaming, ErrIdleTimeout, w.idle) })
		w.idleTimer.Stop()
	}
	return prefix, false, nil
}

// readFirst reads body until the first byte that counts, its end or an
// error.
func (w *streamWatch) readFirst(body io.Reader, length int64) (prefix []byte, eof bool, err error) {
	size := prefixChunk
	if length > 0 && length <= maxExactPrefix {
		size = int(length) // net/http gives the end with the last bytes
	}
	prefix = make([]byte, 0, size)
	for {
		if len(prefix) == cap(prefix) {
			prefix = append(prefix, 0)[:len(prefix)]
		}
		n, rerr := body.Read(prefix[len(prefix):cap(prefix)])
		counted := w.counts(prefix[len(prefix) : len(prefix)+n])
		prefix = prefix[:len(prefix)+n]
		switch {
		case rerr != nil && rerr != io.EOF:
			return nil, false, w.timedOut(rerr)
		case (rerr == io.EOF || counted) && !w.firstByteIn():
			return nil, false, w.cause()
		case rerr == io.EOF || counted:
			return prefix, rerr == io.EOF, nil
		}
		keep := len(prefix)
		if w.sse != nil {
			keep = w.sse.kept
		}
		switch {
		case keep > maxPrefix:
			return nil, false, errTooManyKeepalives
		case len(prefix)-keep > maxPrefix:
			return nil, false, errEventTooLong
		}
	}
}

// read reads from rc with the idle timer running. Keepalives do not
// restart it: their wait is taken off what is left of it.
func (w *streamWatch) read(rc io.Reader, p []byte) (int, error) {
	if w == nil || w.idleTimer == nil {
		return rc.Read(p)
	}
	start := time.Now()
	w.idleTimer.Reset(w.idleLeft)
	n, err := rc.Read(p)
	w.idleTimer.Stop()
	if w.counts(p[:n]) {
		w.idleLeft = w.idle
	} else if w.sse != nil {
		if w.idleLeft -= time.Since(start); w.idleLeft <= 0 {
			w.idleLeft = 1 // the next Read that waits fires at once
		}
	}
	if err != nil && err != io.EOF {
		err = w.timedOut(err)
	}
	return n, err
}

// firstByteBody is the body of a failure response read under a first
// byte timeout: its first byte, or its end, disarms the timer.
type firstByteBody struct {
	io.ReadCloser
	w *streamWatch
}

func (b *firstByteBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 || err == io.EOF {
		b.w.firstByteIn()
	}
	return n, err
}

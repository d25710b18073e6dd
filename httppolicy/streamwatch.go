package httppolicy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// maxPrefix bounds what an attempt reads ahead while it waits for the
// first byte that counts: a stream that sends more keepalives than this
// before its first event fails the attempt, and so does an event being
// read that grows past it before it counts. The two bounds are apart: the
// event being read is not a keepalive.
const maxPrefix = 1 << 20

// prefixChunk is the size of the first read ahead of a body of unknown
// or large length: enough for a small body to come with its EOF, so that
// the call can end at once. A body of known length up to maxExactPrefix
// gets a buffer of its size.
const (
	prefixChunk    = 512
	maxExactPrefix = 64 << 10
)

var (
	errTooManyKeepalives = errors.New("httppolicy: more than 1 MiB of keepalives before the first event")
	errEventTooLong      = errors.New("httppolicy: more than 1 MiB in the event being read, before the first event")
)

// States of a streamWatch.
const (
	watchFirstByte int32 = iota // waiting for the first byte that counts
	watchStreaming              // the first byte is in: only the idle timer may fire
	watchFired                  // a timer fired and canceled the attempt
	watchOver                   // the attempt has ended
)

// streamWatch runs the stream timers of one attempt; it holds the
// attempt's contexts because its timers fire on goroutines of their own.
// The attempt sends its request with ctx, a child of the attempt's context
// canceled with a *streamTimeoutError as its cause when a timer fires.
// net/http would turn a plain cancellation into context.Canceled, which a
// breaker does not count, so the attempt returns the cause instead (see
// timedOut).
//
// state orders the timers against the events that disarm them: the first
// byte (watchFirstByte to watchStreaming), the end of the attempt (to
// watchOver). A timer fires only if it moves state first, so a first byte
// that comes as the timer fires either wins or is reported as late, never
// both.
type streamWatch struct {
	t      *Transport
	parent context.Context // the attempt's context
	ctx    context.Context // parent's child, sent with the request
	cancel context.CancelCauseFunc
	state  atomic.Int32
	// recorded is set once the timeout has been recorded (see timedOut).
	recorded atomic.Bool

	firstByte, idle time.Duration
	fbTimer         *time.Timer // nil without a first byte timeout
	idleTimer       *time.Timer // nil until the response is handed over with an idle timeout

	// sse is set for a text/event-stream response that is not encoded:
	// only its events count.
	sse      *sseScanner
	idleLeft time.Duration // of the idle timeout, while only keepalives come
}

// newStreamWatch returns the watch of an attempt with context parent,
// its first byte timer armed.
func newStreamWatch(t *Transport, parent context.Context, st streamTimeouts) *streamWatch {
	w := &streamWatch{t: t, parent: parent, firstByte: st.firstByte, idle: st.idle}
	w.ctx, w.cancel = context.WithCancelCause(parent)
	if w.firstByte > 0 {
		w.fbTimer = time.AfterFunc(w.firstByte, w.fireFirstByte)
	}
	return w
}

func (w *streamWatch) fireFirstByte() { w.fire(watchFirstByte, ErrFirstByteTimeout, w.firstByte) }
func (w *streamWatch) fireIdle()      { w.fire(watchStreaming, ErrIdleTimeout, w.idle) }

// fire cancels the attempt with a timeout error, if the watch is still in
// state from and the attempt's own context is live (a deadline or the
// caller ended it first: theirs is the error).
func (w *streamWatch) fire(from int32, sentinel error, d time.Duration) {
	if w.parent.Err() != nil || !w.state.CompareAndSwap(from, watchFired) {
		return
	}
	w.cancel(&streamTimeoutError{sentinel: sentinel, name: w.t.Name, timeout: d})
}

// timedOut returns the timeout error the attempt was canceled with, or nil.
// The first call that finds it records the timeout: whoever sees the
// error (the attempt, or a Read of the body) records it before passing it
// on, so the record is there when the caller has the error, and a timer
// that fired just after the attempt's own context ended (its cause then is
// the context's) is not recorded.
func (w *streamWatch) timedOut() error {
	err, ok := context.Cause(w.ctx).(*streamTimeoutError)
	if !ok {
		return nil
	}
	if w.recorded.CompareAndSwap(false, true) {
		tel := w.t.telemetry()
		if err.sentinel == ErrFirstByteTimeout {
			tel.firstByte.Record(w.parent)
		} else {
			tel.idle.Record(w.parent)
		}
	}
	return err
}

// cause returns the error that canceled the attempt: the timeout's, or
// the attempt context's own (a deadline, the caller).
func (w *streamWatch) cause() error {
	if te := w.timedOut(); te != nil {
		return te
	}
	return context.Cause(w.ctx)
}

// firstByteIn disarms the first byte timer (it may be called again). It
// reports false if the timer fired first: the attempt is canceled.
func (w *streamWatch) firstByteIn() bool {
	if w.state.CompareAndSwap(watchFirstByte, watchStreaming) {
		if w.fbTimer != nil {
			w.fbTimer.Stop()
		}
		return true
	}
	return w.state.Load() != watchFired
}

// end ends the watch with its attempt: no timer fires after it.
func (w *streamWatch) end() {
	w.state.Store(watchOver)
	if w.fbTimer != nil {
		w.fbTimer.Stop()
	}
	if w.idleTimer != nil {
		w.idleTimer.Stop()
	}
	w.cancel(context.Canceled)
}

// closing disarms the idle timer for good as the caller closes the body.
func (w *streamWatch) closing() {
	if w.state.CompareAndSwap(watchStreaming, watchOver) && w.idleTimer != nil {
		w.idleTimer.Stop()
	}
}

// watchResponse prepares the watch for resp's body: SSE events or every
// byte. A body still encoded (a Content-Encoding other than identity, as
// net/http leaves it when the caller set Accept-Encoding) cannot be
// scanned: every byte counts.
func (w *streamWatch) watchResponse(resp *http.Response) {
	if ct := resp.Header["Content-Type"]; len(ct) > 0 && isEventStream(ct[0]) && !encoded(resp.Header) {
		keep := w.t.KeepaliveEvents
		if keep == nil {
			keep = defaultKeepaliveEvents
		}
		w.sse = newSSEScanner(keep)
	}
}

// encoded reports whether h gives a Content-Encoding other than identity.
func encoded(h http.Header) bool {
	for _, ce := range h["Content-Encoding"] {
		if ce = strings.TrimSpace(ce); ce != "" && !strings.EqualFold(ce, "identity") {
			return true
		}
	}
	return false
}

// counts reports whether the chunk p of the body brought data that counts:
// for an event stream, the end of an event that counts, or data of a large
// event or its end.
func (w *streamWatch) counts(p []byte) bool {
	if w.sse != nil {
		return w.sse.scan(p) > 0 || w.sse.largeRead
	}
	return len(p) > 0
}

// keepalives returns how many of the n bytes read ahead are keepalives:
// for an event stream, all but those of the event being read.
func (w *streamWatch) keepalives(n int) int {
	if w.sse != nil {
		return w.sse.kept
	}
	return n
}

// start watches resp's body. With a first byte timeout, it reads until
// the first byte that counts is in: until then, a late byte is the
// attempt's failure, which may be retried. It returns the bytes read, and
// whole if they are the whole body. resp's own body is closed then, and
// on error. An idle timeout starts once the first byte is in.
func (w *streamWatch) start(resp *http.Response) (prefix []byte, whole bool, err error) {
	w.watchResponse(resp)
	if w.firstByte <= 0 {
		w.firstByteIn()
	} else {
		if prefix, whole, err = w.readFirst(resp.Body, resp.ContentLength); err != nil || whole {
			resp.Body.Close()
			return prefix, whole, err
		}
	}
	if w.idle > 0 {
		w.startIdle()
	}
	return prefix, false, nil
}

// readFirst reads body until the first byte that counts, its end or an
// error, while the first byte timer runs, and returns what it read. eof
// reports that it read the whole body. On error the caller closes body.
func (w *streamWatch) readFirst(body io.Reader, length int64) (prefix []byte, eof bool, err error) {
	if length > 0 && length <= maxExactPrefix {
		// net/http gives the end of a body of known length with its last
		// bytes, so a buffer of its size is read once.
		prefix = make([]byte, 0, length)
	} else {
		prefix = make([]byte, 0, prefixChunk)
	}
	for {
		if len(prefix) == cap(prefix) {
			prefix = append(prefix, 0)[:len(prefix)]
		}
		n, rerr := body.Read(prefix[len(prefix):cap(prefix)])
		counted := w.counts(prefix[len(prefix) : len(prefix)+n])
		prefix = prefix[:len(prefix)+n]
		switch {
		case rerr == io.EOF:
			if !w.firstByteIn() {
				return nil, false, w.cause()
			}
			return prefix, true, nil
		case rerr != nil:
			if te := w.timedOut(); te != nil {
				return nil, false, te
			}
			return nil, false, rerr
		case counted:
			if !w.firstByteIn() {
				return nil, false, w.cause()
			}
			return prefix, false, nil
		}
		switch keep := w.keepalives(len(prefix)); {
		case keep > maxPrefix:
			return nil, false, errTooManyKeepalives
		case len(prefix)-keep > maxPrefix:
			return nil, false, errEventTooLong
		}
	}
}

// startIdle arms the idle timer for the body handed over.
func (w *streamWatch) startIdle() {
	w.idleLeft = w.idle
	w.idleTimer = time.AfterFunc(time.Hour, w.fireIdle)
	w.idleTimer.Stop()
}

// read reads from the handed over body rc, with the idle timer, if any,
// running while it waits. Keepalives do not restart the timer: their wait
// is taken off what is left of it.
func (w *streamWatch) read(rc io.Reader, p []byte) (int, error) {
	if w.idleTimer == nil {
		return rc.Read(p)
	}
	var start time.Time
	if w.sse != nil {
		start = time.Now()
	}
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
		if te := w.timedOut(); te != nil {
			err = te
		}
	}
	return n, err
}

// firstByteBody is the body of a failure response read into memory under
// a first byte timeout: its first byte (or its end) disarms the timer.
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

package grpcpolicy_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/retry"
)

// fakeStream is a client stream whose messages the test feeds: the
// timeout tests run in synctest bubbles, where a real connection cannot.
type fakeStream struct {
	ctx  context.Context
	msgs chan []byte // closed: io.EOF
	mu   sync.Mutex
	sent int
}

func (f *fakeStream) RecvMsg(m any) error {
	select {
	case b, ok := <-f.msgs:
		if !ok {
			return io.EOF
		}
		m.(*frame).b = b
		return nil
	case <-f.ctx.Done():
		return status.FromContextError(f.ctx.Err()).Err()
	}
}

func (f *fakeStream) SendMsg(any) error {
	f.mu.Lock()
	f.sent++
	f.mu.Unlock()
	return nil
}

func (f *fakeStream) Header() (metadata.MD, error) { return nil, nil }
func (f *fakeStream) Trailer() metadata.MD         { return nil }
func (f *fakeStream) CloseSend() error             { return nil }
func (f *fakeStream) Context() context.Context     { return f.ctx }

// fakeStreamer opens fakeStreams, each fed by the channel it takes from
// feeds in turn.
type fakeStreamer struct {
	mu      sync.Mutex
	opened  []*fakeStream
	feeds   []chan []byte
	nextIdx int
}

func (s *fakeStreamer) streamer(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &fakeStream{ctx: ctx, msgs: s.feeds[s.nextIdx]}
	s.nextIdx++
	s.opened = append(s.opened, f)
	return f, nil
}

func (s *fakeStreamer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.opened)
}

func feeds(n int) []chan []byte {
	fs := make([]chan []byte, n)
	for i := range fs {
		fs[i] = make(chan []byte, 8)
	}
	return fs
}

func openFake(t *testing.T, c *grpcpolicy.Client, s *fakeStreamer) grpc.ClientStream {
	t.Helper()
	cs, err := c.StreamInterceptor()(t.Context(), watchDesc, nil, mWatch, s.streamer)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func checkTimeout(t *testing.T, err error, kind string, d time.Duration) {
	t.Helper()
	var te *grpcpolicy.StreamTimeoutError
	if !errors.As(err, &te) || te.Kind != kind || te.Duration != d {
		t.Fatalf("err = %v, want a %s timeout of %v", err, kind, d)
	}
	if !errors.Is(err, deadline.ErrExceeded) || !errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("err = %v (code %v): want deadline.ErrExceeded, context.DeadlineExceeded, DEADLINE_EXCEEDED", err, status.Code(err))
	}
}

func TestStreamFirstMessageTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bh := newBulkhead(t, "dep", 1, 0)
		c := newClient(t, grpcpolicy.ClientConfig{Policy: bh, FirstMessageTimeout: 2 * time.Second, IdleTimeout: time.Second})
		s := &fakeStreamer{feeds: feeds(1)}
		cs := openFake(t, c, s)
		start := time.Now()
		err := cs.RecvMsg(new(frame))
		checkTimeout(t, err, grpcpolicy.KindFirstMessage, 2*time.Second)
		if el := time.Since(start); el != 2*time.Second {
			t.Errorf("fired after %v, want 2s", el)
		}
		var te *grpcpolicy.StreamTimeoutError
		if !errors.As(context.Cause(s.opened[0].ctx), &te) {
			t.Errorf("context.Cause = %v, want the *StreamTimeoutError", context.Cause(s.opened[0].ctx))
		}
		if bh.Active() != 0 {
			t.Error("slot held after the timeout")
		}
	})
}

// A first message just in time disarms the first-message timeout; the
// idle timeout then bounds each wait for the next one.
func TestStreamIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bh := newBulkhead(t, "dep", 1, 0)
		c := newClient(t, grpcpolicy.ClientConfig{Policy: bh, FirstMessageTimeout: 2 * time.Second, IdleTimeout: time.Second})
		s := &fakeStreamer{feeds: feeds(1)}
		cs := openFake(t, c, s)
		feed := s.feeds[0]
		go func() {
			time.Sleep(2*time.Second - time.Millisecond)
			feed <- []byte("1")
			// Each next message a little under the idle timeout.
			for range 5 {
				time.Sleep(time.Second - time.Millisecond)
				feed <- []byte("n")
			}
		}()
		for i := range 6 {
			if err := cs.RecvMsg(new(frame)); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		start := time.Now()
		err := cs.RecvMsg(new(frame))
		checkTimeout(t, err, grpcpolicy.KindIdle, time.Second)
		if el := time.Since(start); el != time.Second {
			t.Errorf("fired after %v, want 1s", el)
		}
		if bh.Active() != 0 {
			t.Error("slot held after the timeout")
		}
	})
}

// Time the caller spends between RecvMsg calls is not idle time: the
// messages are there when it asks.
func TestStreamIdleCountsOnlyWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient(t, grpcpolicy.ClientConfig{Policy: newBulkhead(t, "dep", 1, 0), IdleTimeout: time.Second})
		s := &fakeStreamer{feeds: feeds(1)}
		cs := openFake(t, c, s)
		for range 4 {
			s.feeds[0] <- []byte("m")
		}
		close(s.feeds[0])
		for range 4 {
			if err := cs.RecvMsg(new(frame)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Second) // a slow caller
		}
		if err := cs.RecvMsg(new(frame)); err != io.EOF {
			t.Fatalf("end: %v, want io.EOF", err)
		}
	})
}

// A first-message timeout is retried while nothing has reached the caller,
// as httppolicy's first byte timeout is: a new stream, the request sent
// again. Once every attempt has timed out, the call ends exhausted, with
// the timeout's identity.
func TestStreamFirstMessageTimeoutRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRetry(t, retry.Config{MaxAttempts: 2})
		c := newClient(t, grpcpolicy.ClientConfig{Policy: rt, FirstMessageTimeout: time.Second})
		s := &fakeStreamer{feeds: feeds(2)}
		s.feeds[1] <- []byte("late but there")
		close(s.feeds[1])
		cs := openFake(t, c, s)
		if err := cs.SendMsg(&frame{b: []byte("req")}); err != nil {
			t.Fatal(err)
		}
		got, err := recvAll(cs)
		if err != nil || len(got) != 1 || got[0] != "late but there" {
			t.Fatalf("got %v, %v", got, err)
		}
		if s.count() != 2 || s.opened[1].sent != 1 {
			t.Errorf("%d streams, the second sent %d messages; want 2 and 1", s.count(), s.opened[1].sent)
		}

		// Every attempt times out.
		s = &fakeStreamer{feeds: feeds(2)}
		cs = openFake(t, c, s)
		err = cs.RecvMsg(new(frame))
		checkTimeout(t, err, grpcpolicy.KindFirstMessage, time.Second)
		if !errors.Is(err, retry.ErrExhausted) || s.count() != 2 {
			t.Errorf("err %v after %d streams; want exhausted after 2", err, s.count())
		}
	})
}

// An idle timeout comes after a message has reached the caller: never
// retried.
func TestStreamIdleTimeoutNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient(t, grpcpolicy.ClientConfig{Policy: newRetry(t, retry.Config{MaxAttempts: 3}), IdleTimeout: time.Second})
		s := &fakeStreamer{feeds: feeds(3)}
		s.feeds[0] <- []byte("one")
		cs := openFake(t, c, s)
		if err := cs.RecvMsg(new(frame)); err != nil {
			t.Fatal(err)
		}
		err := cs.RecvMsg(new(frame))
		checkTimeout(t, err, grpcpolicy.KindIdle, time.Second)
		if errors.Is(err, retry.ErrExhausted) || s.count() != 1 {
			t.Errorf("err %v after %d streams; want the timeout itself after 1", err, s.count())
		}
	})
}

// The caller's cancellation ends a stream at once, timers or not.
func TestStreamCancelBeforeTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bh := newBulkhead(t, "dep", 1, 0)
		c := newClient(t, grpcpolicy.ClientConfig{Policy: bh, FirstMessageTimeout: time.Hour})
		s := &fakeStreamer{feeds: feeds(1)}
		ctx, cancel := context.WithCancel(t.Context())
		cs, err := c.StreamInterceptor()(ctx, watchDesc, nil, mWatch, s.streamer)
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(time.Minute, cancel)
		err = cs.RecvMsg(new(frame))
		if status.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		synctest.Wait()
		if bh.Active() != 0 {
			t.Error("slot held")
		}
	})
}

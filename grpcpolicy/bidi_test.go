package grpcpolicy_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/retry"
)

// Bidirectional streams, sender and receiver on two goroutines, against a
// server that fails at random before its first answer: the retries replay
// what was sent while the sender keeps sending, and the receiver gets
// every message once, in order, unless the sender saw the failure first
// (SendMsg returned it): then the stream ends with it. Run under -race.
func TestStreamBidiRetryWhileSending(t *testing.T) {
	svc := &service{stream: func(_ string, ss grpc.ServerStream) error {
		// Read a random number of messages, then fail, or echo them all
		// and everything after.
		failAfter := -1
		if rand.IntN(2) == 0 {
			failAfter = rand.IntN(5)
		}
		var held []*frame
		for i := 0; ; i++ {
			if i == failAfter {
				return status.Error(codes.Unavailable, "shed")
			}
			f := new(frame)
			err := ss.RecvMsg(f)
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			if failAfter >= 0 {
				held = append(held, f) // answer nothing before failing
				continue
			}
			if err := ss.SendMsg(f); err != nil {
				return err
			}
		}
		for _, f := range held {
			if err := ss.SendMsg(f); err != nil {
				return err
			}
		}
		return nil
	}}
	bh := newBulkhead(t, "dep", 4, 0)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: newPipeline(t, pipelineOf(bh, newRetry(t, retry.Config{MaxAttempts: 50})))})
	e := newEnv(t, false, svc, nil, c.DialOptions())
	const msgs = 20
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for round := range 10 {
				cs, err := e.conn.NewStream(context.Background(), chatDesc, mChat)
				if err != nil {
					t.Errorf("open: %v", err)
					return
				}
				sent := make(chan error, 1)
				go func() {
					for i := range msgs {
						if err := cs.SendMsg(&frame{b: fmt.Appendf(nil, "%d-%d-%d", w, round, i)}); err != nil {
							sent <- err
							return
						}
					}
					sent <- cs.CloseSend()
				}()
				got, err := recvAll(cs)
				serr := <-sent
				if err != nil {
					// A failure is retried unless something reached the
					// caller: an answer, or an error from SendMsg (the
					// sender stopped there, so a retry could not send
					// the rest).
					if status.Code(err) != codes.Unavailable || (len(got) == 0 && serr == nil) {
						t.Errorf("stream %d-%d: %v after %d messages (send: %v)", w, round, err, len(got), serr)
					}
					continue
				}
				if serr != nil {
					t.Errorf("stream %d-%d: send: %v", w, round, serr)
				}
				if len(got) != msgs {
					t.Errorf("stream %d-%d: %d messages, want %d", w, round, len(got), msgs)
					continue
				}
				for i, m := range got {
					if want := fmt.Sprintf("%d-%d-%d", w, round, i); m != want {
						t.Errorf("stream %d-%d: message %d = %q, want %q", w, round, i, m, want)
						break
					}
				}
			}
		})
	}
	wg.Wait()
	if n := svc.ran.Load(); n <= 40 {
		t.Errorf("the server ran %d times for 40 streams: no retry was exercised", n)
	}
	if bh.Active() != 0 {
		t.Errorf("%d slots held", bh.Active())
	}
}

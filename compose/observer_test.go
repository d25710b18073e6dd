package compose_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/retry"
)

// observingStage is a two-phase Bulkhead-slot policy that records what
// compose tells it about each attempt.
type observingStage struct {
	fakeStage
	mu   sync.Mutex
	seen []string
}

func (s *observingStage) Observe(d time.Duration, failed bool) {
	s.mu.Lock()
	s.seen = append(s.seen, fmt.Sprintf("%v/%v", d, failed))
	s.mu.Unlock()
}

func (s *observingStage) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.seen)
}

func noWait() retry.Schedule {
	return retry.ScheduleFunc(func() (time.Duration, bool) { return 0, true })
}

func TestObserverSeesEachAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &observingStage{}
		rt, err := retry.New(retry.Config{MaxAttempts: 4, NewSchedule: noWait})
		if err != nil {
			t.Fatal(err)
		}
		at, err := deadline.New(deadline.Config{Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		p, err := compose.New("x", compose.Policies{Bulkhead: obs, Retry: rt, Attempt: at})
		if err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		n := 0
		err = p.Execute(context.Background(), func(ctx context.Context) error {
			n++
			switch n {
			case 1: // a failure: not a latency sample
				time.Sleep(5 * time.Millisecond)
				return boom
			case 2: // the attempt deadline: a sample of its length
				<-ctx.Done()
				return ctx.Err()
			case 3: // a rejection from below: nothing to learn
				return errRejectedBelow
			}
			time.Sleep(7 * time.Millisecond)
			return nil
		})
		if err == nil {
			t.Fatalf("Execute = nil; want the rejection to end the loop")
		}
		if got, want := obs.String(), "[5ms/true 50ms/false]"; got != want {
			t.Errorf("observed %s; want %s", got, want)
		}

		// Without a retry, the whole of what is below is one attempt.
		obs2 := &observingStage{}
		q, err := compose.New("y", compose.Policies{Bulkhead: obs2, Attempt: at})
		if err != nil {
			t.Fatal(err)
		}
		q.Execute(context.Background(), func(context.Context) error { time.Sleep(3 * time.Millisecond); return nil })
		q.Execute(context.Background(), func(context.Context) error { return context.Canceled })
		if got, want := obs2.String(), "[3ms/false]"; got != want {
			t.Errorf("observed %s; want %s (a cancellation is not reported)", got, want)
		}
	})
}

var errRejectedBelow = func() error {
	br, err := breaker.New(breaker.Config{})
	if err != nil {
		panic(err)
	}
	br.ForceOpen()
	return br.Execute(context.Background(), func(context.Context) error { return nil })
}()

// An AnswerClock in ctx (httppolicy's Transport puts one) ends the sample
// at the answer, not at the end of the attempt.
func TestObserverStopsAtTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &observingStage{}
		at, err := deadline.New(deadline.Config{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		p, err := compose.New("x", compose.Policies{Bulkhead: obs, Attempt: at})
		if err != nil {
			t.Fatal(err)
		}
		var clock stage.AnswerClock
		ctx := stage.WithAnswerClock(context.Background(), &clock)
		p.Execute(ctx, func(ctx context.Context) error {
			time.Sleep(10 * time.Millisecond) // the wait for the headers
			stage.AnswerClockFrom(ctx).Answered()
			time.Sleep(200 * time.Millisecond) // the stream
			return nil
		})
		if got, want := obs.String(), "[10ms/false]"; got != want {
			t.Errorf("observed %s; want %s", got, want)
		}
	})
}

// A Bulkhead-slot observer alone (watertight.New with only an Adaptive
// section) is still run in two phases and timed by compose, so that an
// AnswerClock (httppolicy's) ends its samples at the answer: its own
// Execute could not see the clock and would time a whole stream.
func TestObserverAloneIsTimedByCompose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &observingStage{}
		p, err := compose.New("x", compose.Policies{Bulkhead: obs})
		if err != nil {
			t.Fatal(err)
		}
		var clock stage.AnswerClock
		ctx := stage.WithAnswerClock(context.Background(), &clock)
		p.Execute(ctx, func(ctx context.Context) error {
			time.Sleep(10 * time.Millisecond)
			stage.AnswerClockFrom(ctx).Answered()
			time.Sleep(200 * time.Millisecond)
			return nil
		})
		if got, want := obs.String(), "[10ms/false]"; got != want {
			t.Errorf("observed %s; want %s", got, want)
		}
	})
}

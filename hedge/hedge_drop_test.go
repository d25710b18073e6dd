package hedge_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/hedge"
)

// values counts the values of a hedged call's attempts: made, and freed by
// the documented rule (once the attempt's context ends with a cause that
// matches ErrLost).
type values struct{ made, freed atomic.Int32 }

// fn returns a value after 20 ms whatever its context says, and frees it
// by the rule.
func (v *values) fn(ctx context.Context) (*int32, error) {
	time.Sleep(20 * time.Millisecond)
	n := v.made.Add(1)
	context.AfterFunc(ctx, func() {
		if errors.Is(context.Cause(ctx), hedge.ErrLost) {
			v.freed.Add(1)
		}
	})
	return &n, nil
}

// Every value Do drops is freed by the rule, and none it returns is:
// when the call ends with a winner, when the caller's context ends first,
// and when a Deadline's timer ends it first.
func TestHedgedDropsOnlyWhatTheRuleFrees(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(h *hedge.Hedge, v *values) (*int32, error)
	}{
		{"winner", func(h *hedge.Hedge, v *values) (*int32, error) {
			return hedge.Do(context.Background(), h, nil, v.fn)
		}},
		{"caller canceled", func(h *hedge.Hedge, v *values) (*int32, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Millisecond)
			defer cancel()
			return hedge.Do(ctx, h, nil, v.fn)
		}},
		{"deadline fired", func(h *hedge.Hedge, v *values) (*int32, error) {
			d, err := deadline.New(deadline.Config{Timeout: 15 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			var got *int32
			err = d.Execute(context.Background(), func(ctx context.Context) error {
				var err error
				got, err = hedge.Do(ctx, h, nil, v.fn)
				return err
			})
			return got, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, err := hedge.New(hedge.Config{MaxHedges: 2, Delay: time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				v := &values{}
				got, err := tc.run(h, v)
				time.Sleep(time.Second)
				synctest.Wait()
				returned := int32(0)
				if got != nil {
					returned = 1
				}
				if made, freed := v.made.Load(), v.freed.Load(); made != 3 || returned+freed != made {
					t.Errorf("%d values made, %d returned (err %v), %d freed; want 3 made, each returned or freed", made, returned, err, freed)
				}
			})
		})
	}
}

type key struct{}

// An attempt's context carries the call's values and deadline.
func TestHedgedAttemptKeepsValuesAndDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := hedge.New(hedge.Config{MaxHedges: 1, Delay: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), time.Second)
		defer cancel()
		want, _ := ctx.Deadline()
		_, err = hedge.Do(ctx, h, nil, func(ctx context.Context) (int, error) {
			if at, ok := ctx.Deadline(); !ok || !at.Equal(want) || ctx.Value(key{}) != "v" {
				t.Errorf("attempt %d: deadline %v, %v, value %v; want %v and v", hedge.Attempt(ctx), at, ok, ctx.Value(key{}), want)
			}
			return 1, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// No attempt wins once a Deadline's timer has fired, even one whose
// success settles before the call has seen the timer.
func TestHedgedSuccessAfterTheDeadlineTimerDoesNotWin(t *testing.T) {
	won := 0
	for range 100 {
		synctest.Test(t, func(t *testing.T) {
			h, _ := hedge.New(hedge.Config{MaxHedges: 1, Delay: time.Millisecond})
			d, _ := deadline.New(deadline.Config{Timeout: 10 * time.Millisecond})
			var got *int
			err := d.Execute(context.Background(), func(ctx context.Context) error {
				var err error
				got, err = hedge.Do(ctx, h, nil, func(actx context.Context) (*int, error) {
					<-ctx.Done() // the Deadline's timer has fired
					return new(int), nil
				})
				return err
			})
			if got != nil || err == nil {
				won++
			}
			time.Sleep(time.Second)
		})
	}
	if won > 0 {
		t.Errorf("%d of 100 calls: a success after the Deadline's timer won", won)
	}
}

// After a Deadline's timer, every loser's cause matches both ErrLost and
// the Deadline's, even when the call reads an attempt's report before it
// sees the timer (its goroutine was busy, here in OnHedge).
func TestLosersCauseMatchesTheDeadlineWhenAReportComesFirst(t *testing.T) {
	for range 60 {
		synctest.Test(t, func(t *testing.T) {
			h, _ := hedge.New(hedge.Config{Delay: 10 * time.Millisecond, MaxHedges: 2,
				OnHedge: func(_ context.Context, n int, _ bool) {
					if n == 3 {
						time.Sleep(2 * time.Second) // busy across the timer and attempt 1's answer
					}
				}})
			d, _ := deadline.New(deadline.Config{Timeout: time.Second})
			var c2 context.Context
			err := d.Execute(context.Background(), func(ctx context.Context) error {
				_, err := hedge.Do(ctx, h, nil, func(ctx context.Context) (int, error) {
					switch hedge.Attempt(ctx) {
					case 1:
						time.Sleep(1500 * time.Millisecond) // deaf; answers after the timer
						return 1, nil
					case 2:
						c2 = ctx
					}
					<-ctx.Done()
					return 0, ctx.Err()
				})
				return err
			})
			synctest.Wait()
			if cause := context.Cause(c2); !errors.Is(err, deadline.ErrExceeded) || !errors.Is(cause, hedge.ErrLost) || !errors.Is(cause, deadline.ErrExceeded) {
				t.Errorf("err %v; attempt 2's cause %v; want a timeout, and a cause matching ErrLost and the Deadline's", err, cause)
			}
		})
	}
}

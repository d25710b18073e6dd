package ratelimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
)

// A storm of calls with random deadlines, cancellations and panics while
// 429s keep moving the hold and answers feed the gate with small counts: every call returns, fn runs only for admitted
// calls and never at its deadline, every error is a rejection or
// the caller's own, and no goroutine is left behind (goleak, TestMain).
func TestStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{RequestsPerSecond: 200, Burst: 20, TokensPerMinute: 600000, MaxWait: 800 * time.Millisecond})
		rng := rand.New(rand.NewPCG(1, 2))
		var mu sync.Mutex
		rnd := func(n int) int { mu.Lock(); defer mu.Unlock(); return rng.IntN(n) }
		var ran, rejected, canceled, panicked atomic.Int64
		var wg sync.WaitGroup
		for i := range 400 {
			wg.Go(func() {
				time.Sleep(time.Duration(rnd(2000)) * time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rnd(1500))*time.Millisecond)
				defer cancel()
				ctx = ratelimit.WithCost(ctx, rnd(2000))
				if rnd(4) == 0 {
					go func() {
						time.Sleep(time.Duration(rnd(300)) * time.Millisecond)
						cancel()
					}()
				}
				defer func() {
					if r := recover(); r != nil {
						panicked.Add(1)
					}
				}()
				err := l.Execute(ctx, func(ctx context.Context) error {
					// The fake clock stands still while goroutines run:
					// an admitted wait ended strictly before the deadline.
					if dl, _ := ctx.Deadline(); !time.Now().Before(dl) {
						t.Error("fn ran at its deadline")
					}
					ran.Add(1)
					switch rnd(10) {
					case 0:
						observe(l, resp(429, "Retry-After-Ms", "300"))
					case 1:
						observe(l, resp(200, "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "150ms"))
					case 2:
						panic(i)
					case 3, 4:
						observe(l, resp(200, "x-ratelimit-limit-requests", "20",
							"x-ratelimit-remaining-requests", strconv.Itoa(rnd(4)), "x-ratelimit-reset-requests", "100ms"))
					}
					return nil
				})
				switch {
				case err == nil:
				case errors.Is(err, policy.ErrRejected):
					rejected.Add(1)
				case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
					canceled.Add(1)
				default:
					t.Errorf("unexpected error %v", err)
				}
			})
		}
		wg.Wait()
		if ran.Load()+rejected.Load()+canceled.Load() != 400 {
			t.Errorf("ran %d + rejected %d + canceled %d != 400", ran.Load(), rejected.Load(), canceled.Load())
		}
		if ran.Load() == 0 || rejected.Load() == 0 || panicked.Load() == 0 {
			t.Errorf("storm too tame: ran %d, rejected %d, canceled %d, panicked %d",
				ran.Load(), rejected.Load(), canceled.Load(), panicked.Load())
		}
	})
}

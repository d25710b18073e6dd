package fallback_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/fallback"
	"github.com/watertight/watertight/retry"
)

// A storm over two providers, each behind bulkhead, retry, breaker and an
// attempt timeout, failing, stalling, panicking and streaming at random,
// with callers cancelling at random: every call ends, an answer comes from
// one alternative only, nothing falls back or retries after delivering, no
// slot is left taken and no goroutine is left behind (goleak, TestMain).
func TestStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		var mu sync.Mutex
		rnd := func(n int) int { mu.Lock(); defer mu.Unlock(); return rng.IntN(n) }
		var bulkheads []*bulkhead.Bulkhead
		provider := func(name string) *compose.Pipeline {
			bh := must[*bulkhead.Bulkhead](t)(bulkhead.New(bulkhead.Config{Name: name, Limit: 8, MaxQueue: 8}))
			rt := must[*retry.Retry](t)(retry.New(retry.Config{MaxAttempts: 3, InitialInterval: 10 * time.Millisecond}))
			br := must[*breaker.Breaker](t)(breaker.New(breaker.Config{ConsecutiveFailures: 10, OpenTimeout: 100 * time.Millisecond}))
			at := must[*deadline.Deadline](t)(deadline.New(deadline.Config{Timeout: 200 * time.Millisecond}))
			t.Cleanup(func() { bh.Close(); br.Close() })
			bulkheads = append(bulkheads, bh)
			return must[*compose.Pipeline](t)(compose.New(name, compose.Policies{Bulkhead: bh, Retry: rt, Breaker: br, Attempt: at}))
		}
		primary, secondary := provider("openai"), provider("anthropic")
		var answered, failed, panicked, deliveredThenFailed atomic.Int64
		var wg sync.WaitGroup
		for range 300 {
			wg.Go(func() {
				time.Sleep(time.Duration(rnd(1000)) * time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+rnd(600))*time.Millisecond)
				defer cancel()
				if rnd(5) == 0 {
					wg.Go(func() { time.Sleep(time.Duration(rnd(200)) * time.Millisecond); cancel() })
				}
				var delivered atomic.Int32 // alternatives that delivered a chunk in this call
				fn := func(name string) func(context.Context) (string, error) {
					return func(ctx context.Context) (string, error) {
						switch rnd(8) {
						case 0:
							return "", errors.New("500")
						case 1:
							<-ctx.Done() // stall: the attempt timeout cuts it
							return "", ctx.Err()
						case 2:
							panic("provider bug")
						case 3: // a stream that breaks after a chunk
							if delivered.Add(1) > 1 {
								t.Error("a second alternative (or attempt) streamed after a delivery")
							}
							fallback.MarkDelivered(ctx)
							time.Sleep(time.Duration(rnd(50)) * time.Millisecond)
							return "", errors.New("stream broken")
						}
						time.Sleep(time.Duration(rnd(100)) * time.Millisecond)
						return name, ctx.Err()
					}
				}
				func() {
					defer func() {
						if recover() != nil {
							panicked.Add(1)
						}
					}()
					v, err := fallback.Do(ctx, fallback.Config{}, []fallback.Alternative[string]{
						{Name: "openai", Policy: primary, Fn: fn("openai")},
						{Name: "anthropic", Policy: secondary, Fn: fn("anthropic")},
					})
					switch {
					case err == nil && (v == "openai" || v == "anthropic"):
						answered.Add(1)
					case err == nil:
						t.Errorf("answer %q", v)
					default:
						fe, ok := errors.AsType[*fallback.Error](err)
						if !ok {
							t.Errorf("err %v is no *fallback.Error", err)
							return
						}
						if fe.Stop == fallback.StopDelivered {
							deliveredThenFailed.Add(1)
						}
						failed.Add(1)
					}
				}()
			})
		}
		wg.Wait()
		for _, bh := range bulkheads {
			if bh.Active() != 0 || bh.Queued() != 0 {
				t.Errorf("bulkhead: %d active, %d queued after the storm", bh.Active(), bh.Queued())
			}
		}
		if answered.Load()+failed.Load()+panicked.Load() != 300 || answered.Load() == 0 || panicked.Load() == 0 || deliveredThenFailed.Load() == 0 {
			t.Errorf("answered %d, failed %d (%d after delivery), panicked %d",
				answered.Load(), failed.Load(), deliveredThenFailed.Load(), panicked.Load())
		}
	})
}

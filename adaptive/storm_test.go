package adaptive_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight/watertight/adaptive"
)

var errStorm = errors.New("storm")

// A storm on the real clock: 24 goroutines, random latencies, errors,
// timeouts, cancellations and panics, two-phase callers as compose, Close
// racing with probes (ProbeInterval 1 ms, spaced by the controller), and a
// reader of Limit and the state. The limit stays in its bounds and every slot
// and place is freed.
func TestStormWithCloseDuringProbes(t *testing.T) {
	for round := range 3 {
		l := mustNew(t, adaptive.Config{MinLimit: 2, MaxLimit: 40, InitialLimit: 10,
			MaxQueue: adaptive.Unbounded, MaxWait: 5 * time.Millisecond, ProbeInterval: time.Millisecond})
		ctx, stop := context.WithTimeout(context.Background(), 600*time.Millisecond)
		var wg sync.WaitGroup
		var bad atomic.Int64
		for g := range 24 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), uint64(round)))
				for ctx.Err() == nil {
					cctx, cancel := context.WithTimeout(ctx, time.Duration(r.IntN(4000))*time.Microsecond)
					if g%4 == 0 { // two steps, as compose
						if p, err := l.Acquire(cctx); err == nil {
							d := time.Duration(r.IntN(2000)) * time.Microsecond
							time.Sleep(d)
							l.Observe(d, r.IntN(5) == 0)
							p.Release()
						}
						cancel()
						continue
					}
					func() {
						defer func() { recover() }()
						l.Execute(cctx, func(c context.Context) error {
							time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
							switch r.IntN(20) {
							case 0:
								panic("x")
							case 1:
								return errStorm
							case 2:
								return context.Canceled
							case 3:
								return c.Err()
							}
							return nil
						})
					}()
					cancel()
				}
			})
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				lim := l.Limit()
				if lim < 2 || lim > 40 {
					bad.Add(1)
					t.Errorf("Limit %d outside [2, 40]", lim)
				}
				_ = l.State()
				time.Sleep(50 * time.Microsecond)
			}
		})
		time.Sleep(time.Duration(100+round*200) * time.Millisecond)
		l.Close() // concurrent with probes and samples
		<-ctx.Done()
		wg.Wait()
		stop()
		if l.Active() != 0 || l.Queued() != 0 {
			t.Errorf("round %d: Active %d Queued %d after all calls returned", round, l.Active(), l.Queued())
		}
	}
}

package route_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/hedge"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/route"
)

// TestCallerEndIsNoFailure checks that an attempt ended by its caller's
// deadline is no failure (a failure would double the estimate), but counts
// as a latency the endpoint took at least.
func TestCallerEndIsNoFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, route.Config{Endpoints: names(2), OutlierFactor: -1})
		p := pipeline(t, compose.Policies{Route: r})
		for range 6 {
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			err := p.Execute(ctx, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v", err)
			}
		}
		for _, s := range r.Status() {
			if s.Latency != 0.3 {
				t.Errorf("%s: latency estimate %v s after calls its callers ended at 0.3 s; want 0.3 s, no failure", s.Name, s.Latency)
			}
		}
	})
}

// TestCutAttemptsStillSlow checks that an endpoint whose attempts are all
// cut short, by callers giving up on a hang or by a hedge whose other
// attempt wins, is still seen to be slow and loses its traffic.
func TestCutAttemptsStillSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newModel(2, 10*time.Millisecond)
		r := newRouter(t, route.Config{Endpoints: names(2)})
		p := pipeline(t, compose.Policies{Route: r})
		load(t.Context(), p, m.fn, 20, time.Second)
		m.set(1, 0, nil, true)
		m.reset()
		for range 20 { // one call a second, each given up after 500 ms
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			p.Execute(ctx, m.fn)
			cancel()
			time.Sleep(500 * time.Millisecond)
		}
		// Its first call, then probes 1, 2, 4 and 8 s apart.
		if c := m.counts(); c[1] > 5 {
			t.Errorf("the hanging endpoint took %d of 20 calls its callers gave up on; want it to lose them but for its probes", c[1])
		}
	})
	synctest.Test(t, func(t *testing.T) {
		m := newModel(2, 2*time.Millisecond)
		m.set(1, 300*time.Millisecond, nil, false)
		r := newRouter(t, route.Config{Endpoints: names(2)})
		p := pipeline(t, compose.Policies{Route: r})
		h, err := hedge.New(hedge.Config{MaxHedges: 1, Delay: 30 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for range 40 {
			hedge.Do(t.Context(), h, p, func(ctx context.Context) (struct{}, error) { return struct{}{}, m.fn(ctx) })
		}
		if c := m.counts(); c[1] > 3 {
			t.Errorf("the slow endpoint took %d attempts of 40 hedged calls, every one lost; want it seen slow after the first", c[1])
		}
	})
}

// TestProbeWaitDoubles checks that the wait before a probe doubles after
// each probe that failed, from the first, up to ten times ProbeInterval,
// whatever the failure (here a spent quota).
func TestProbeWaitDoubles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, route.Config{Endpoints: names(2), ProbeInterval: 20 * time.Millisecond})
		p := pipeline(t, compose.Policies{Route: r})
		start := time.Now()
		var at []time.Duration
		for time.Since(start) < 2*time.Second {
			p.Execute(t.Context(), func(ctx context.Context) error {
				if ep, _ := route.EndpointOf(ctx); ep.Index == 0 {
					at = append(at, time.Since(start))
					return policy.ErrQuotaSpent
				}
				return nil
			})
			time.Sleep(time.Millisecond)
		}
		// The first call, then probes 20, 40, 80, 160 and 200 ms apart.
		for i := 2; i < len(at); i++ {
			gap, before := at[i]-at[i-1], at[i-1]-at[i-2]
			if gap < min(2*before, 200*time.Millisecond)-2*time.Millisecond || gap > 202*time.Millisecond {
				t.Fatalf("e0 ran at %v: gap %v after %v; want each wait double the one before, up to 200ms", at, gap, before)
			}
		}
		if len(at) < 8 || len(at) > 16 {
			t.Errorf("e0 ran %d times in 2 s: %v; want its probes, the waits doubling to 200 ms", len(at), at)
		}
	})
}

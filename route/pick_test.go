package route_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/hedge"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

var errDown = errors.New("down")

func newRetry(t testing.TB, attempts int) *retry.Retry {
	t.Helper()
	r, err := retry.New(retry.Config{MaxAttempts: attempts, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRetryAvoidsTried checks that each retry goes to an endpoint the call
// has not tried, while one is left.
func TestRetryAvoidsTried(t *testing.T) {
	r := newRouter(t, route.Config{Endpoints: names(3), OutlierFactor: -1})
	p := pipeline(t, compose.Policies{Retry: newRetry(t, 3), Route: r})
	for range 200 {
		var seen []int
		p.Execute(t.Context(), func(ctx context.Context) error {
			ep, _ := route.EndpointOf(ctx)
			seen = append(seen, ep.Index)
			return errDown
		})
		if len(seen) != 3 || seen[0] == seen[1] || seen[1] == seen[2] || seen[0] == seen[2] {
			t.Fatalf("attempts went to endpoints %v; want three different ones", seen)
		}
	}
}

// TestRefusedEndpointSkipped checks that an endpoint whose breaker refuses
// costs the caller nothing: the attempt goes on to another endpoint.
func TestRefusedEndpointSkipped(t *testing.T) {
	eps := names(3)
	var brs []*breaker.Breaker
	for i := range eps {
		b, err := breaker.New(breaker.Config{Name: eps[i].Name, ConsecutiveFailures: 5})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		eps[i].Breaker, brs = b, append(brs, b)
	}
	brs[0].ForceOpen()
	// No ejection: on a busy machine a pause could make one an outlier.
	r := newRouter(t, route.Config{Endpoints: eps, OutlierFactor: -1})
	p := pipeline(t, compose.Policies{Route: r})
	counts := make([]int, 3)
	for range 300 {
		err := p.Execute(t.Context(), func(ctx context.Context) error {
			ep, _ := route.EndpointOf(ctx)
			counts[ep.Index]++
			return nil
		})
		if err != nil {
			t.Fatalf("Execute = %v; want nil with two endpoints in", err)
		}
	}
	if counts[0] != 0 {
		t.Errorf("the open endpoint ran %d calls", counts[0])
	}
	if st := r.Status(); !st[0].Out || st[1].Out {
		t.Errorf("Status = %+v; want e0 out, e1 in", st)
	}

	// Every breaker open: a rejection of the router's own.
	brs[1].ForceOpen()
	brs[2].ForceOpen()
	err := p.Execute(t.Context(), func(context.Context) error { t.Error("fn ran"); return nil })
	var re *policy.RejectedError
	if !errors.Is(err, route.ErrUnavailable) || !errors.Is(err, policy.ErrRejected) || !errors.As(err, &re) ||
		re.Kind != "route" || re.Name != "r" || re.Reason != "unavailable" {
		t.Fatalf("Execute = %v; want route \"r\" unavailable", err)
	}
}

// TestHoldSkipped checks that calls go to another endpoint, without
// waiting, while one endpoint's rate-limit hold is on, and wait in its
// RateLimit when every endpoint is held.
func TestHoldSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eps := names(2)
		var rls []*ratelimit.Limiter
		for i := range eps {
			l, err := ratelimit.New(ratelimit.Config{Name: eps[i].Name, MaxWait: time.Minute, MaxHold: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			eps[i].RateLimit, rls = l, append(rls, l)
		}
		r := newRouter(t, route.Config{Endpoints: eps})
		p := pipeline(t, compose.Policies{Route: r})
		rls[0].HoldFor(10 * time.Second)
		start := time.Now()
		for range 50 {
			got, err := route.Do(t.Context(), p, func(ctx context.Context, ep route.Picked) (string, error) { return ep.Name, nil })
			if err != nil || got != "e1" {
				t.Fatalf("Do = %q, %v; want e1 while e0 is held", got, err)
			}
		}
		if waited := time.Since(start); waited > 0 {
			t.Errorf("calls waited %v with an endpoint free", waited)
		}
		rls[1].HoldFor(20 * time.Second)
		if _, err := route.Do(t.Context(), p, func(ctx context.Context, ep route.Picked) (string, error) { return ep.Name, nil }); err != nil {
			t.Fatalf("Do with both held = %v; want it to wait out a hold", err)
		}
		if waited := time.Since(start); waited < 10*time.Second {
			t.Errorf("the call with both held took %v; want it to wait for a hold's end", waited)
		}
	})
}

// TestMaxConcurrent checks the cap per endpoint, and the rejection when
// every endpoint is at its cap.
func TestMaxConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eps := names(2)
		eps[0].MaxConcurrent, eps[1].MaxConcurrent = 1, 2
		r := newRouter(t, route.Config{Endpoints: eps})
		p := pipeline(t, compose.Policies{Route: r})
		release := make(chan struct{})
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				p.Execute(t.Context(), func(context.Context) error { <-release; return nil })
			})
		}
		synctest.Wait()
		if st := r.Status(); st[0].InFlight != 1 || st[1].InFlight != 2 {
			t.Fatalf("Status = %+v; want 1 and 2 in flight", st)
		}
		err := p.Execute(t.Context(), func(context.Context) error { t.Error("fn ran"); return nil })
		if !errors.Is(err, route.ErrUnavailable) {
			t.Errorf("Execute at every cap = %v; want ErrUnavailable", err)
		}
		close(release)
		wg.Wait()
		if st := r.Status(); st[0].InFlight != 0 || st[1].InFlight != 0 {
			t.Errorf("Status after = %+v; want nothing in flight", st)
		}
	})
}

// TestHangSeenBeforeAnyEnds checks that an endpoint whose calls hang loses
// its traffic before any of them ends: the age of its oldest call counts.
func TestHangSeenBeforeAnyEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newModel(3, 200*time.Millisecond)
		at, _ := deadline.New(deadline.Config{Timeout: time.Hour})
		eps := names(3)
		for i := range eps {
			eps[i].Attempt = at
		}
		r := newRouter(t, route.Config{Endpoints: eps, OutlierFactor: -1})
		p := pipeline(t, compose.Policies{Route: r})
		load(t.Context(), p, m.fn, 50, 5*time.Second)
		m.set(2, 0, nil, true)
		m.reset()
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { load(ctx, p, m.fn, 50, 30*time.Second) })
		time.Sleep(30 * time.Second)
		c := m.counts()
		cancel()
		wg.Wait()
		t.Logf("calls per endpoint with e2 hanging: %v", c)
		if total := c[0] + c[1] + c[2]; c[2]*100 > total {
			t.Errorf("the hanging endpoint got %d of %d calls, none of which ended; want at most 1%%", c[2], total)
		}
	})
}

// TestEjectAndProbeBack checks that a slow endpoint is ejected, gets
// probes while out, and comes back by a probe once healed.
func TestEjectAndProbeBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newModel(3, 100*time.Millisecond)
		r := newRouter(t, route.Config{Endpoints: names(3)})
		p := pipeline(t, compose.Policies{Route: r})
		load(t.Context(), p, m.fn, 50, 2*time.Second)
		m.set(1, 3*time.Second, nil, false)
		load(t.Context(), p, m.fn, 50, 10*time.Second)
		if st := r.Status(); !st[1].Ejected || !st[1].Out {
			t.Fatalf("Status = %+v; want e1 ejected", st)
		}
		m.reset()
		load(t.Context(), p, m.fn, 50, 10*time.Second)
		if n := m.counts()[1]; n < 1 || n > 4 {
			t.Errorf("the ejected endpoint got %d calls in 10 s; want its probes, one at a time, each 3 s, the waits between them doubling from 1 s", n)
		}
		m.set(1, 100*time.Millisecond, nil, false)
		load(t.Context(), p, m.fn, 50, 15*time.Second) // the probe under way ends, the next comes within 10 s
		if st := r.Status(); st[1].Out || st[1].Ejected {
			t.Fatalf("Status after healing = %+v; want e1 back", st)
		}
		m.reset()
		load(t.Context(), p, m.fn, 50, 10*time.Second)
		if c := m.counts(); c[1] < 100 {
			t.Errorf("calls after the return: %v; want e1 to take its share", c)
		}
	})
}

// TestEjectedShare checks that no more than MaxEjectedShare of the
// endpoints are ejected at once, and no ejection with OutlierFactor < 0.
func TestEjectedShare(t *testing.T) {
	for _, tc := range []struct {
		factor, share float64
		want          int
	}{{0, 0.25, 1}, {0, 0.5, 2}, {-1, 0.5, 0}} {
		synctest.Test(t, func(t *testing.T) {
			m := newModel(4, 100*time.Millisecond)
			r := newRouter(t, route.Config{Endpoints: names(4), OutlierFactor: tc.factor, MaxEjectedShare: tc.share})
			p := pipeline(t, compose.Policies{Route: r})
			load(t.Context(), p, m.fn, 50, 2*time.Second)
			for i := 1; i < 4; i++ {
				m.set(i, 2*time.Second, nil, false)
			}
			load(t.Context(), p, m.fn, 50, 20*time.Second)
			ejected := 0
			for _, s := range r.Status() {
				if s.Ejected {
					ejected++
				}
			}
			if ejected != tc.want {
				t.Errorf("factor %v, share %v: %d ejected; want %d (%+v)", tc.factor, tc.share, ejected, tc.want, r.Status())
			}
		})
	}
}

// TestStreamLatencyIsFirstByte checks that a streamed answer's latency is
// its time to the first byte, not to its end.
func TestStreamLatencyIsFirstByte(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, route.Config{Endpoints: names(1)})
		p := pipeline(t, compose.Policies{Route: r})
		for range 5 {
			p.Execute(t.Context(), func(ctx context.Context) error {
				time.Sleep(100 * time.Millisecond)
				stage.FirstByte(ctx)
				time.Sleep(10 * time.Second)
				return nil
			})
		}
		if got := r.Status()[0].Latency; got < 0.099 || got > 0.101 {
			t.Errorf("latency estimate %v s; want 0.1 s, the time to the first byte", got)
		}
	})
}

// TestSpentQuotaOut checks that an endpoint answering with a spent quota
// is out, that the attempt goes on to another endpoint at once, without a
// retry, and that the quota error comes back when none is left.
func TestSpentQuotaOut(t *testing.T) {
	r := newRouter(t, route.Config{Endpoints: names(2), ProbeInterval: time.Hour})
	p := pipeline(t, compose.Policies{Route: r})
	spent := 0
	for range 100 {
		err := p.Execute(t.Context(), func(ctx context.Context) error {
			if ep, _ := route.EndpointOf(ctx); ep.Index == 0 {
				spent++
				return policy.ErrQuotaSpent
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Execute = %v; want the other endpoint's answer", err)
		}
	}
	if spent != 1 {
		t.Errorf("the endpoint whose quota is spent ran %d calls; want 1", spent)
	}
	err := p.Execute(t.Context(), func(ctx context.Context) error { return policy.ErrQuotaSpent })
	if !errors.Is(err, policy.ErrQuotaSpent) {
		t.Errorf("Execute with every quota spent = %v; want ErrQuotaSpent", err)
	}
}

// TestDoAndEndpointOf checks that fn learns its endpoint, and that Do
// outside a routed pipeline gives the zero Picked.
func TestDoAndEndpointOf(t *testing.T) {
	eps := names(2)
	r := newRouter(t, route.Config{Endpoints: eps})
	p := pipeline(t, compose.Policies{Route: r})
	got, err := route.Do(t.Context(), p, func(ctx context.Context, ep route.Picked) (route.Picked, error) {
		if fromCtx, ok := route.EndpointOf(ctx); !ok || fromCtx != ep {
			t.Errorf("EndpointOf = %v, %v; want %v", fromCtx, ok, ep)
		}
		return ep, nil
	})
	if err != nil || got.Name != eps[got.Index].Name {
		t.Errorf("Do = %+v, %v; want an endpoint of %v", got, err, eps)
	}
	plain := pipeline(t, compose.Policies{})
	got, _ = route.Do(t.Context(), plain, func(ctx context.Context, ep route.Picked) (route.Picked, error) { return ep, nil })
	if _, ok := route.EndpointOf(t.Context()); ok || got != (route.Picked{}) {
		t.Errorf("outside a route: %+v; want the zero Picked", got)
	}
}

// TestHedgeAvoidsTried checks that the hedged attempts of a call go to
// different endpoints while one is left.
func TestHedgeAvoidsTried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, route.Config{Endpoints: names(3), OutlierFactor: -1})
		p := pipeline(t, compose.Policies{Route: r})
		h, err := hedge.New(hedge.Config{MaxHedges: 2, Delay: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for range 50 {
			var mu sync.Mutex
			var seen []int
			hedge.Do(t.Context(), h, p, func(ctx context.Context) (struct{}, error) {
				ep, _ := route.EndpointOf(ctx)
				mu.Lock()
				seen = append(seen, ep.Index)
				n := len(seen)
				mu.Unlock()
				if n < 3 {
					<-ctx.Done()
					return struct{}{}, ctx.Err()
				}
				return struct{}{}, nil
			})
			if len(seen) != 3 || seen[0] == seen[1] || seen[1] == seen[2] || seen[0] == seen[2] {
				t.Fatalf("hedged attempts went to endpoints %v; want three different ones", seen)
			}
		}
	})
}

// TestReturnRampsUp checks that an endpoint that comes back takes its
// share gradually: a tenth of its weight at first, all of it Decay later.
func TestReturnRampsUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newModel(2, 100*time.Millisecond)
		r := newRouter(t, route.Config{Endpoints: names(2)})
		p := pipeline(t, compose.Policies{Route: r})
		m.set(1, 2*time.Second, nil, false)
		load(t.Context(), p, m.fn, 100, 5*time.Second)
		if !r.Status()[1].Ejected {
			t.Fatalf("Status = %+v; want e1 ejected", r.Status())
		}
		m.set(1, 100*time.Millisecond, nil, false)
		for r.Status()[1].Out {
			load(t.Context(), p, m.fn, 100, 100*time.Millisecond)
		}
		share := func() float64 {
			m.reset()
			load(t.Context(), p, m.fn, 100, time.Second)
			c := m.counts()
			return float64(c[1]) / float64(c[0]+c[1])
		}
		first := share()
		load(t.Context(), p, m.fn, 100, 10*time.Second)
		later := share()
		t.Logf("e1's share of calls: %.2f in the first second back, %.2f ten seconds later", first, later)
		if first > 0.25 || later < 0.4 {
			t.Errorf("e1's share %.2f in its first second back, %.2f later; want under a quarter, then about half", first, later)
		}
	})
}

// TestFullIsNoReasonForOut checks that an endpoint that is out takes no
// call when the endpoints in are at their MaxConcurrent: the call is
// rejected.
func TestFullIsNoReasonForOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eps := names(2)
		eps[0].MaxConcurrent = 1
		b, _ := breaker.New(breaker.Config{Name: "e1"})
		defer b.Close()
		eps[1].Breaker = b
		r := newRouter(t, route.Config{Endpoints: eps, ProbeInterval: time.Hour})
		p := pipeline(t, compose.Policies{Route: r})
		b.ForceOpen()
		for !r.Status()[1].Out {
			p.Execute(t.Context(), func(context.Context) error { return nil })
		}
		b.Reset()
		release := make(chan struct{})
		go p.Execute(t.Context(), func(context.Context) error { <-release; return nil })
		synctest.Wait()
		err := p.Execute(t.Context(), func(ctx context.Context) error {
			ep, _ := route.EndpointOf(ctx)
			t.Errorf("fn ran on %s", ep.Name)
			return nil
		})
		if !errors.Is(err, route.ErrUnavailable) {
			t.Errorf("Execute with e0 full and e1 out = %v; want ErrUnavailable", err)
		}
		close(release)
	})
}

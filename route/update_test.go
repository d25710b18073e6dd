package route_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/route"
)

// only returns the refused set that leaves endpoint i alone.
func only(i int) uint64 { return ^uint64(1 << i) }

// pickOf picks endpoint i, and fails the test if the router picks another.
func pickOf(t *testing.T, r *route.Router, tried, refused uint64, i int) route.Permit {
	t.Helper()
	_, p, err := r.Pick(t.Context(), tried, refused)
	if err != nil || p.Index() != i {
		t.Fatalf("Pick = endpoint %d, %v; want endpoint %d", p.Index(), err, i)
	}
	return p
}

// observe gives endpoint i of r a success of latency d. Run it in a
// synctest bubble.
func observe(t *testing.T, r *route.Router, i int, d time.Duration) {
	t.Helper()
	p := pickOf(t, r, 0, only(i), i)
	time.Sleep(d)
	p.Done(nil)
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(math.Abs(a), math.Abs(b)) }

// TestUpdateConfig checks that Config returns the Config as given, with the
// Name, MeterProvider and endpoint policies New was given, and that writing
// it back changes nothing.
func TestUpdateConfig(t *testing.T) {
	b, err := breaker.New(breaker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mp := noop.NewMeterProvider()
	eps := names(2)
	eps[0].Breaker = b
	cfg := route.Config{Name: "r", Endpoints: eps, ProbeInterval: 2 * time.Second, MeterProvider: mp}
	r := newRouter(t, cfg)
	eps[0].Weight = 5 // the router keeps its own copy
	cfg.Endpoints = names(2)
	cfg.Endpoints[0].Breaker = b
	if got := r.Config(); !reflect.DeepEqual(got, cfg) {
		t.Fatalf("Config after New = %+v; want %+v, as given", got, cfg)
	}

	up := route.Config{Name: "other", Endpoints: names(2), Decay: time.Minute, MaxEjectedShare: 1}
	up.Endpoints[1].Weight, up.Endpoints[1].MaxConcurrent = 3, 7
	if err := r.Update(up); err != nil {
		t.Fatalf("Update = %v", err)
	}
	want := up
	want.Name, want.MeterProvider = "r", mp
	want.Endpoints = names(2)
	want.Endpoints[0].Breaker = b
	want.Endpoints[1].Weight, want.Endpoints[1].MaxConcurrent = 3, 7
	up.Endpoints[1].Weight = 9 // the router keeps its own copy
	got := r.Config()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Config after Update = %+v; want %+v", got, want)
	}
	got.Endpoints[1].Weight = 9
	if eps := r.Endpoints(); !reflect.DeepEqual(eps, want.Endpoints) {
		t.Errorf("Endpoints = %+v; want %+v", eps, want.Endpoints)
	}
	if err := r.Update(r.Config()); err != nil || !reflect.DeepEqual(r.Config(), want) {
		t.Errorf("Update(Config()) = %v, Config %+v; want nil and no change", err, r.Config())
	}
}

// TestUpdateErrors checks that an invalid Config changes nothing and gets
// New's error, and that the endpoints may not change.
func TestUpdateErrors(t *testing.T) {
	var nilBreaker *breaker.Breaker
	r := newRouter(t, route.Config{Endpoints: names(3), Decay: time.Second})
	before := r.Config()
	mod := func(f func(*route.Config)) route.Config {
		c := route.Config{Endpoints: names(3)}
		f(&c)
		return c
	}
	for _, cfg := range []route.Config{
		mod(func(c *route.Config) { c.Decay = -1 }),
		mod(func(c *route.Config) { c.OutlierFactor = 1 }),
		mod(func(c *route.Config) { c.MaxEjectedShare = 1.5 }),
		mod(func(c *route.Config) { c.ProbeInterval = 25 * time.Hour }),
		mod(func(c *route.Config) { c.Endpoints[1].Weight = -1 }),
		mod(func(c *route.Config) { c.Endpoints[2].MaxConcurrent = -1 }),
		mod(func(c *route.Config) { c.Endpoints[2].Name = "e0" }),
		mod(func(c *route.Config) { c.Endpoints[1].Name = "" }),
		mod(func(c *route.Config) { c.Endpoints = nil }),
	} {
		err := r.Update(cfg)
		cfg.Name = "r"
		_, newErr := route.New(cfg)
		if err == nil || newErr == nil || err.Error() != newErr.Error() {
			t.Errorf("Update(%+v) = %v; want New's error %v", cfg, err, newErr)
		}
	}
	for _, cfg := range []route.Config{
		{Endpoints: names(2)},
		{Endpoints: names(4)},
		mod(func(c *route.Config) { c.Endpoints[1].Name = "x" }),
		mod(func(c *route.Config) { c.Endpoints[0], c.Endpoints[1] = c.Endpoints[1], c.Endpoints[0] }),
	} {
		err := r.Update(cfg)
		if err == nil || !strings.HasPrefix(err.Error(), "route: Config.Endpoints") || !strings.Contains(err.Error(), "fixed at New") {
			t.Errorf("Update with endpoints %+v = %v; want an error naming Config.Endpoints, saying they are fixed", cfg.Endpoints, err)
		}
	}
	if got := r.Config(); !reflect.DeepEqual(got, before) {
		t.Errorf("Config after failed updates = %+v; want %+v", got, before)
	}

	// Name and the endpoints' policies are ignored, even invalid ones.
	cfg := mod(func(c *route.Config) { c.Endpoints[1].Breaker = nilBreaker })
	if err := r.Update(cfg); err != nil {
		t.Errorf("Update with no Name and a nil breaker = %v; want nil: both are ignored", err)
	}
	if got := r.Config(); got.Name != "r" || got.Endpoints[1].Breaker != nil {
		t.Errorf("Config = %+v; want New's Name and policies", got)
	}
}

// TestUpdateMaxConcurrent checks that a lowered MaxConcurrent cuts no call
// in flight and admits none until they drop below it, and that a raised
// one admits calls at once.
func TestUpdateMaxConcurrent(t *testing.T) {
	eps := names(1)
	eps[0].MaxConcurrent = 3
	r := newRouter(t, route.Config{Endpoints: eps})
	ctx := t.Context()
	var in []route.Permit
	var ctxs []context.Context
	for range 3 {
		actx, p, err := r.Pick(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		in, ctxs = append(in, p), append(ctxs, actx)
	}
	eps[0].MaxConcurrent = 1
	if err := r.Update(route.Config{Endpoints: eps}); err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		if st := r.Status(); st[0].InFlight != 3-k {
			t.Fatalf("InFlight = %d; want %d", st[0].InFlight, 3-k)
		}
		if ctxs[k].Err() != nil {
			t.Errorf("call %d in flight was cut: %v", k, ctxs[k].Err())
		}
		if _, _, err := r.Pick(ctx, 0, 0); !errors.Is(err, route.ErrUnavailable) {
			t.Fatalf("Pick with %d in flight over a MaxConcurrent of 1 = %v; want ErrUnavailable", 3-k, err)
		}
		in[k].Done(nil)
	}
	p := pickOf(t, r, 0, 0, 0)
	if _, _, err := r.Pick(ctx, 0, 0); !errors.Is(err, route.ErrUnavailable) {
		t.Fatalf("Pick at the new MaxConcurrent = %v; want ErrUnavailable", err)
	}
	eps[0].MaxConcurrent = 2
	if err := r.Update(route.Config{Endpoints: eps}); err != nil {
		t.Fatal(err)
	}
	q := pickOf(t, r, 0, 0, 0)
	p.Done(nil)
	q.Done(nil)
}

// TestUpdateWeight checks that a new Weight holds for the picks after
// the update.
func TestUpdateWeight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, route.Config{Endpoints: names(2), OutlierFactor: -1})
		observe(t, r, 0, 100*time.Millisecond)
		observe(t, r, 1, 100*time.Millisecond)
		eps := names(2)
		eps[0].Weight = 3
		if err := r.Update(route.Config{Endpoints: eps}); err != nil {
			t.Fatal(err)
		}
		// Held in flight, the calls spread as the weights: the pick takes the
		// lighter of the two.
		var counts [2]int
		var held []route.Permit
		for range 40 {
			_, p, err := r.Pick(t.Context(), 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			counts[p.Index()]++
			held = append(held, p)
		}
		for _, p := range held {
			p.Done(nil)
		}
		if counts[0] < 29 || counts[0] > 31 {
			t.Errorf("calls in flight = %v; want 30 and 10 at weights 3 and 1", counts)
		}
	})
}

// TestUpdateRamp checks that a returned endpoint's ramp goes on from its
// return, to the new Weight, over the new Decay.
func TestUpdateRamp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, route.Config{Endpoints: names(2), Decay: 10 * time.Second, ProbeInterval: time.Second})
		observe(t, r, 0, 100*time.Millisecond)
		observe(t, r, 1, 100*time.Millisecond)
		p := pickOf(t, r, 0, only(0), 0)
		p.Refused()
		time.Sleep(time.Second)
		p = pickOf(t, r, 0, 0, 0) // its probe
		time.Sleep(100 * time.Millisecond)
		p.Done(nil)
		load := func(want float64) {
			t.Helper()
			if st := r.Status(); st[0].Out || !near(st[0].Load, want) {
				t.Errorf("Status = %+v; want e0 in with a load of %v", st[0], want)
			}
		}
		load(0.1 / 0.1)
		time.Sleep(5 * time.Second)
		load(0.1 / 0.5)
		eps := names(2)
		eps[0].Weight = 2
		if err := r.Update(route.Config{Endpoints: eps, Decay: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
		load(0.1 / (2 * 0.5))
		if err := r.Update(route.Config{Endpoints: eps, Decay: 20 * time.Second}); err != nil {
			t.Fatal(err)
		}
		load(0.1 / (2 * 0.25))
	})
}

// TestUpdateDecay checks that the estimate forgets a latency over the new
// Decay for the attempts picked after the update, and over the old one for
// an attempt picked before.
func TestUpdateDecay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, route.Config{Endpoints: names(1), Decay: 10 * time.Second})
		observe(t, r, 0, time.Second)
		time.Sleep(time.Second)
		p := pickOf(t, r, 0, 0, 0)
		if err := r.Update(route.Config{Endpoints: names(1), Decay: time.Second}); err != nil {
			t.Fatal(err)
		}
		p.Done(nil)
		want := math.Exp(-0.1) // picked before: the old Decay
		if got := r.Status()[0].Latency; !near(got, want) {
			t.Errorf("estimate = %v; want %v", got, want)
		}
		time.Sleep(time.Second)
		p = pickOf(t, r, 0, 0, 0)
		p.Done(nil)
		want *= math.Exp(-1) // the new Decay
		if got := r.Status()[0].Latency; !near(got, want) {
			t.Errorf("estimate = %v; want %v", got, want)
		}
	})
}

// TestUpdateProbeInterval checks that a probe already due at a time keeps
// it, and that the waits after it follow the new ProbeInterval.
func TestUpdateProbeInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, route.Config{Endpoints: names(2), ProbeInterval: time.Second})
		p := pickOf(t, r, 0, only(0), 0)
		p.Refused()
		if err := r.Update(route.Config{Endpoints: names(2), ProbeInterval: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second - time.Millisecond)
		p = pickOf(t, r, 0, 0, 1)
		p.Done(nil)
		time.Sleep(time.Millisecond)
		p = pickOf(t, r, 0, 0, 0) // the probe, at the time it was due
		p.Done(errDown)
		// The wait doubles after a probe that failed: 20s.
		time.Sleep(20*time.Second - time.Millisecond)
		p = pickOf(t, r, 0, 0, 1)
		p.Done(nil)
		time.Sleep(time.Millisecond)
		p = pickOf(t, r, 0, 0, 0)
		p.Done(nil)
		if st := r.Status(); st[0].Out {
			t.Errorf("Status = %+v; want e0 back after its probe", st)
		}
	})
}

// ejectLast gives r's endpoints an estimate of 100ms but the last, 1s, and
// picks until the last is ejected.
func ejectLast(t *testing.T, r *route.Router, n int) {
	t.Helper()
	for i := range n - 1 {
		observe(t, r, i, 100*time.Millisecond)
	}
	observe(t, r, n-1, time.Second)
	for range 200 {
		_, p, err := r.Pick(t.Context(), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		p.Done(nil)
		if r.Status()[n-1].Ejected {
			return
		}
	}
}

// TestUpdateKeepsEjected checks that a raised OutlierFactor and
// MaxEjectedShare release no endpoint at once, that state carries over,
// and that the probe is judged by the new OutlierFactor.
func TestUpdateKeepsEjected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, route.Config{Endpoints: names(3), ProbeInterval: time.Second})
		ejectLast(t, r, 3)
		held := pickOf(t, r, 0, only(0), 0)
		before := r.Status()
		if !before[2].Ejected {
			t.Fatalf("Status = %+v; want e2 ejected", before)
		}
		if err := r.Update(route.Config{Endpoints: names(3), ProbeInterval: time.Second, OutlierFactor: 20, MaxEjectedShare: 1}); err != nil {
			t.Fatal(err)
		}
		if after := r.Status(); !reflect.DeepEqual(after, before) {
			t.Fatalf("Status after Update = %+v; want %+v", after, before)
		}
		for range 100 {
			_, p, err := r.Pick(t.Context(), 0, 0)
			if err != nil || p.Index() == 2 {
				t.Fatalf("Pick = endpoint %d, %v; want e2 out until its probe", p.Index(), err)
			}
			p.Done(nil)
		}
		held.Done(nil)
		time.Sleep(time.Second)
		p := pickOf(t, r, 0, 0, 2) // its probe
		time.Sleep(time.Second)
		p.Done(nil)
		// 1s is no outlier beside 100ms by a factor of 20.
		if st := r.Status(); st[2].Out || st[2].Ejected {
			t.Errorf("Status = %+v; want e2 back by its probe", st)
		}
	})
}

// TestUpdateOutlierFactor checks that a new OutlierFactor holds for the
// picks after the update: with none, an outlier is not ejected.
func TestUpdateOutlierFactor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, route.Config{Endpoints: names(3)})
		if err := r.Update(route.Config{Endpoints: names(3), OutlierFactor: -1}); err != nil {
			t.Fatal(err)
		}
		ejectLast(t, r, 3)
		if st := r.Status(); st[2].Ejected {
			t.Errorf("Status = %+v; want no ejection", st)
		}
	})
}

// TestUpdateMaxEjectedShare checks that a lowered MaxEjectedShare ejects
// no more endpoints, and releases none.
func TestUpdateMaxEjectedShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, route.Config{Endpoints: names(4), MaxEjectedShare: 1, ProbeInterval: time.Hour})
		ejectLast(t, r, 4)
		if err := r.Update(route.Config{Endpoints: names(4), MaxEjectedShare: 0.1, ProbeInterval: time.Hour}); err != nil {
			t.Fatal(err)
		}
		observe(t, r, 2, time.Second)
		for range 200 {
			_, p, err := r.Pick(t.Context(), 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			p.Done(nil)
		}
		if st := r.Status(); !st[3].Ejected || st[2].Ejected {
			t.Errorf("Status = %+v; want e3 still ejected, and e2 not: 1 of 4 at most", st)
		}
	})
}

// randomConfig returns a random Config for names(3), and whether it is
// valid.
func randomConfig(rng *rand.Rand) (route.Config, bool) {
	pick := func(vs ...float64) float64 { return vs[rng.IntN(len(vs))] }
	c := route.Config{
		Endpoints:       names(3),
		Decay:           time.Duration(pick(0, 1e6, 1e9)),
		OutlierFactor:   pick(0, 2, -1),
		MaxEjectedShare: pick(0, 0.3, 1),
		ProbeInterval:   time.Duration(pick(0, 1e6, 1e7)),
	}
	for i := range c.Endpoints {
		c.Endpoints[i].Weight = pick(0, 0.5, 1, 3)
		c.Endpoints[i].MaxConcurrent = int(pick(0, 1, 2, 5))
	}
	switch rng.IntN(8) {
	case 0:
		c.Decay = -1
	case 1:
		c.OutlierFactor = 1
	case 2:
		c.Endpoints[rng.IntN(3)].MaxConcurrent = -1
	case 3:
		c.Endpoints = c.Endpoints[:2]
	case 4:
		c.Endpoints[1].Name = "x"
	default:
		return c, true
	}
	return c, false
}

// TestUpdateConcurrent runs calls from many goroutines while another
// updates the router with random valid and invalid Configs.
func TestUpdateConcurrent(t *testing.T) {
	r := newRouter(t, route.Config{Endpoints: names(3)})
	p := pipeline(t, compose.Policies{Route: r})
	var stop atomic.Bool
	var calls, ran, rejected atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				calls.Add(1)
				err := p.Execute(t.Context(), func(context.Context) error {
					ran.Add(1)
					if (n+g)%7 == 0 {
						return errDown
					}
					return nil
				})
				switch {
				case errors.Is(err, route.ErrUnavailable):
					rejected.Add(1)
				case err != nil && !errors.Is(err, errDown):
					t.Errorf("Execute = %v", err)
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	last := r.Config()
	for range 2000 {
		cfg, valid := randomConfig(rng)
		err := r.Update(cfg)
		if valid != (err == nil) {
			t.Fatalf("Update(%+v) = %v; want an error: %v", cfg, err, !valid)
		}
		if valid {
			cfg.Name = "r"
			last = cfg
		}
		if got := r.Config(); !reflect.DeepEqual(got, last) {
			t.Fatalf("Config = %+v; want %+v", got, last)
		}
	}
	stop.Store(true)
	wg.Wait()
	if calls.Load() != ran.Load()+rejected.Load() {
		t.Errorf("%d calls, %d ran and %d rejected; want every call to run or be rejected", calls.Load(), ran.Load(), rejected.Load())
	}
	for _, st := range r.Status() {
		if st.InFlight != 0 {
			t.Errorf("Status = %+v; want nothing in flight", r.Status())
		}
	}
	t.Logf("%d calls, %d rejected", calls.Load(), rejected.Load())
}

package breaker

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/policy"
)

// sameConfig reports whether a and b are equal, their funcs and
// MeterProviders compared by identity.
func sameConfig(a, b Config) bool {
	same := func(x, y any) bool {
		vx, vy := reflect.ValueOf(x), reflect.ValueOf(y)
		if !vx.IsValid() || !vy.IsValid() || vx.IsNil() || vy.IsNil() {
			return (!vx.IsValid() || vx.IsNil()) == (!vy.IsValid() || vy.IsNil())
		}
		return vx.Pointer() == vy.Pointer()
	}
	if !same(a.IsFailure, b.IsFailure) || !same(a.OnReject, b.OnReject) ||
		!same(a.OnStateChange, b.OnStateChange) || a.MeterProvider != b.MeterProvider {
		return false
	}
	a.IsFailure, a.OnReject, a.OnStateChange, a.MeterProvider = nil, nil, nil, nil
	b.IsFailure, b.OnReject, b.OnStateChange, b.MeterProvider = nil, nil, nil, nil
	return reflect.DeepEqual(a, b)
}

// probes takes every probe place of a half-open b and returns the permits.
func probes(t *testing.T, b *Breaker) []Permit {
	t.Helper()
	var ps []Permit
	for range 100 {
		p, err := b.Allow(context.Background())
		if err != nil {
			wantRejected(t, err, "", ReasonHalfOpenFull)
			return ps
		}
		ps = append(ps, p)
	}
	t.Fatal("100 probes admitted")
	return nil
}

// Config returns the Config as given, defaults not filled; after an
// Update, the new one with the Name, MeterProvider and hooks of New.
func TestUpdateConfig(t *testing.T) {
	if got := newBreaker(t, Config{}).Config(); !sameConfig(got, Config{}) {
		t.Fatalf("Config() = %+v, want the zero Config", got)
	}
	var log hookLog
	onReject := func(context.Context, *policy.RejectedError) {}
	isFailure := func(err error) bool { return err == errBoom }
	cfg := Config{Name: "llm", ConsecutiveFailures: 3, IsFailure: isFailure, OnReject: onReject, OnStateChange: log.hook}
	b := newBreaker(t, cfg)
	if !sameConfig(b.Config(), cfg) {
		t.Fatalf("Config() = %+v, want %+v", b.Config(), cfg)
	}
	other := func(from, to State) { t.Error("OnStateChange of Update called") }
	err := b.Update(Config{Name: "other", ConsecutiveFailures: 1, OpenTimeout: time.Minute,
		IsFailure: func(error) bool { return false }, OnStateChange: other})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Name: "llm", ConsecutiveFailures: 1, OpenTimeout: time.Minute,
		IsFailure: isFailure, OnReject: onReject, OnStateChange: log.hook}
	if !sameConfig(b.Config(), want) {
		t.Fatalf("Config() = %+v, want %+v", b.Config(), want)
	}
	// New's IsFailure still judges, and New's hook and Name report.
	call(b, errBoom)
	err, _ = call(b, nil)
	wantRejected(t, err, "llm", ReasonOpen)
	if got := log.list(); len(got) != 1 || got[0] != "closed->open" {
		t.Fatalf("transitions = %v, want [closed->open]", got)
	}
}

// An invalid Config changes nothing and returns New's error for it.
func TestUpdateInvalid(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"FailureRatio", Config{FailureRatio: 2}},
		{"FailureRatio NaN", Config{FailureRatio: math.NaN()}},
		{"Window", Config{Window: -1}},
		{"OpenTimeout", Config{OpenTimeout: -1}},
		{"SlowCallDuration without the rule", Config{SlowCallDuration: time.Second}},
		{"SlowCallRatio", Config{SlowCallRatio: 1.5, SlowCallDuration: time.Second}},
		{"SlowCallDuration over 9/10 of Window", Config{SlowCallRatio: 0.5, SlowCallDuration: 10 * time.Second, Window: 10 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, want := New(tt.cfg)
			if want == nil {
				t.Fatal("New accepted the Config")
			}
			cfg := Config{ConsecutiveFailures: 2}
			if tt.cfg.SlowCallRatio > 0 {
				cfg = slowConfig()
			}
			b := newBreaker(t, cfg)
			call(b, errBoom)
			if err := b.Update(tt.cfg); err == nil || err.Error() != want.Error() {
				t.Fatalf("Update = %v, want %v", err, want)
			}
			if !sameConfig(b.Config(), cfg) {
				t.Fatalf("Config() = %+v after a failed Update, want %+v", b.Config(), cfg)
			}
			if c := b.Counts(); c.ConsecutiveFailures != 1 || b.State() != Closed {
				t.Fatalf("state %v, counts %+v; want closed, 1 failure", b.State(), c)
			}
		})
	}
}

// The slow rule cannot be turned on or off: the error names SlowCallRatio
// and nothing changes.
func TestUpdateSlowRuleOnOff(t *testing.T) {
	tests := []struct {
		name     string
		from, to Config
	}{
		{"on", Config{}, slowConfig()},
		{"off", slowConfig(), Config{ConsecutiveFailures: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBreaker(t, tt.from)
			err := b.Update(tt.to)
			if err == nil || !strings.HasPrefix(err.Error(), "breaker: Config.SlowCallRatio ") {
				t.Fatalf("Update = %v, want an error naming Config.SlowCallRatio", err)
			}
			if !sameConfig(b.Config(), tt.from) {
				t.Fatalf("Config() = %+v, want %+v", b.Config(), tt.from)
			}
		})
	}
}

// ConsecutiveFailures applies at once, to the counts so far: the update
// trips nothing, counts already past the new rule trip at the next
// failure, and a raised rule holds off a trip the old one would make.
func TestUpdateConsecutiveFailures(t *testing.T) {
	b := newBreaker(t, Config{ConsecutiveFailures: 5})
	for range 3 {
		call(b, errBoom)
	}
	if err := b.Update(Config{ConsecutiveFailures: 2}); err != nil {
		t.Fatal(err)
	}
	if c := b.Counts(); b.State() != Closed || c.ConsecutiveFailures != 3 || c.Requests != 3 {
		t.Fatalf("state %v, counts %+v after Update; want closed, the 3 failures", b.State(), c)
	}
	call(b, nil) // a success is not judged, and ends the run
	call(b, errBoom)
	if s := b.State(); s != Closed {
		t.Fatalf("state %v at 1 failure in a row, want closed", s)
	}
	call(b, errBoom)
	if s := b.State(); s != Open {
		t.Fatalf("state %v at 2 failures in a row, want open", s)
	}

	b = newBreaker(t, Config{ConsecutiveFailures: 2})
	call(b, errBoom)
	if err := b.Update(Config{ConsecutiveFailures: 4}); err != nil {
		t.Fatal(err)
	}
	call(b, errBoom)
	call(b, errBoom)
	if s := b.State(); s != Closed {
		t.Fatalf("state %v at 3 failures in a row, ConsecutiveFailures 4; want closed", s)
	}
	call(b, errBoom)
	if s := b.State(); s != Open {
		t.Fatalf("state %v at 4 failures in a row, want open", s)
	}
}

// A call in flight at an update is judged by the rules in force when it
// ends.
func TestUpdateCallInFlight(t *testing.T) {
	b := newBreaker(t, Config{ConsecutiveFailures: 5})
	call(b, errBoom)
	p, err := b.Allow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Update(Config{ConsecutiveFailures: 2}); err != nil {
		t.Fatal(err)
	}
	p.Done(errBoom)
	if s := b.State(); s != Open {
		t.Fatalf("state %v after the call in flight failed, 2 in a row; want open", s)
	}
}

// FailureRatio and MinRequests apply at once; the next failure trips.
func TestUpdateFailureRatio(t *testing.T) {
	for _, tt := range []struct {
		name     string
		from, to Config
	}{
		{"FailureRatio", Config{FailureRatio: 0.9, MinRequests: 4}, Config{FailureRatio: 0.5, MinRequests: 4}},
		{"MinRequests", Config{FailureRatio: 0.5, MinRequests: 20}, Config{FailureRatio: 0.5, MinRequests: 5}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBreaker(t, tt.from)
			for _, c := range "FSFS" {
				call(b, outcome(c))
			}
			if err := b.Update(tt.to); err != nil {
				t.Fatal(err)
			}
			if s := b.State(); s != Closed {
				t.Fatalf("state %v after Update, want closed", s)
			}
			call(b, errBoom) // 3 of 5
			if s := b.State(); s != Open {
				t.Fatalf("state %v at 3 failures of 5, want open", s)
			}
		})
	}
}

// OpenTimeout applies from the next opening: the open period under way
// keeps its end.
func TestUpdateOpenTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{ConsecutiveFailures: 1, OpenTimeout: time.Minute})
		call(b, errBoom)
		if err := b.Update(Config{ConsecutiveFailures: 1, OpenTimeout: time.Hour}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute - 1)
		if s := b.State(); s != Open {
			t.Fatalf("state %v before 1m, want open", s)
		}
		time.Sleep(1)
		if s := b.State(); s != HalfOpen {
			t.Fatalf("state %v at 1m, want half-open: the period keeps its end", s)
		}
		call(b, errBoom) // the probe fails: open for the new hour
		time.Sleep(time.Hour - 1)
		if s := b.State(); s != Open {
			t.Fatalf("state %v before 1h, want open", s)
		}
		time.Sleep(1)
		if s := b.State(); s != HalfOpen {
			t.Fatalf("state %v at 1h, want half-open", s)
		}
	})
}

// HalfOpenRequests applies from the next period: updated while closed, to
// the next probes; while open, to the probes after the next opening.
func TestUpdateHalfOpenRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := func(n uint32) Config {
			return Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenRequests: n}
		}
		b := newBreaker(t, cfg(1))
		if err := b.Update(cfg(2)); err != nil {
			t.Fatal(err)
		}
		call(b, errBoom)
		time.Sleep(time.Second)
		if ps := probes(t, b); len(ps) != 2 {
			t.Fatalf("%d probes after an Update while closed, want 2", len(ps))
		} else {
			ps[0].Done(errBoom)
			ps[1].Done(nil)
		}

		if err := b.Update(cfg(3)); err != nil { // open
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		ps := probes(t, b)
		if len(ps) != 2 {
			t.Fatalf("%d probes after an Update while open, want 2: the period keeps its number", len(ps))
		}
		ps[0].Done(errBoom)
		ps[1].Done(nil)
		time.Sleep(time.Second)
		if ps := probes(t, b); len(ps) != 3 {
			t.Fatalf("%d probes after the next opening, want 3", len(ps))
		} else {
			for _, p := range ps {
				p.Done(nil)
			}
		}
		if s := b.State(); s != Closed {
			t.Fatalf("state %v after 3 good probes, want closed", s)
		}
	})
}

// Window applies from the next period: the counts under way keep their
// window; Reset starts a period with the new one at once.
func TestUpdateWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := func(w time.Duration) Config {
			return Config{ConsecutiveFailures: 3, Window: w, OpenTimeout: time.Second}
		}
		b := newBreaker(t, cfg(10*time.Second))
		call(b, errBoom)
		call(b, errBoom)
		if err := b.Update(cfg(time.Hour)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		if c := b.Counts(); c.TotalFailures != 0 {
			t.Fatalf("counts %+v 10s later, want none: the period keeps its window", c)
		}
		// The next period counts in an hour.
		trip(t, b, 3)
		time.Sleep(time.Second)
		call(b, nil)
		call(b, errBoom)
		time.Sleep(10 * time.Second)
		if c := b.Counts(); b.State() != Closed || c.TotalFailures != 1 {
			t.Fatalf("state %v, counts %+v 10s into the next period; want closed, 1 failure", b.State(), c)
		}

		if err := b.Update(cfg(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		b.Reset()
		call(b, errBoom)
		time.Sleep(10 * time.Second)
		if c := b.Counts(); c.TotalFailures != 0 {
			t.Fatalf("counts %+v 10s after Reset, want none: Reset takes the new window", c)
		}
	})
}

// An Update keeps the state: an open period, ForceOpen and OpenUntil
// stand, even under rules that would not have tripped.
func TestUpdateKeepsState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lax := Config{ConsecutiveFailures: 100, OpenTimeout: time.Second}
		b := newBreaker(t, Config{ConsecutiveFailures: 1, OpenTimeout: time.Minute})
		call(b, errBoom)
		if err := b.Update(lax); err != nil {
			t.Fatal(err)
		}
		if err, ran := call(b, nil); ran || b.State() != Open {
			t.Fatalf("a call ran (%v), state %v after Update; want open", err, b.State())
		}

		b.Reset()
		b.ForceOpen()
		if err := b.Update(lax); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		if err, ran := call(b, nil); ran || b.State() != Open {
			t.Fatalf("a call ran (%v), state %v; want forced open", err, b.State())
		}

		b.Reset()
		b.OpenUntil(time.Now().Add(time.Minute))
		if err := b.Update(lax); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute - 1)
		if s := b.State(); s != Open {
			t.Fatalf("state %v before OpenUntil's end, want open", s)
		}
		time.Sleep(1)
		if s := b.State(); s != HalfOpen {
			t.Fatalf("state %v at OpenUntil's end, want half-open", s)
		}
	})
}

// SlowCallDuration applies at once to the calls being timed: shortened,
// calls already past it are judged slow at once; lengthened, they are
// judged at the new time.
func TestUpdateSlowCallDuration(t *testing.T) {
	for _, tt := range []struct {
		name string
		d    time.Duration
		trip time.Duration // from the calls' start
	}{
		{"shorter", 200 * time.Millisecond, 500 * time.Millisecond},
		{"longer", 2 * time.Second, 2 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBreaker(t, slowConfig())
				call(b, nil)
				call(b, nil)
				// Deferred, so that a failed test still waits for them.
				defer goCall(b, time.Hour, nil)()
				defer goCall(b, time.Hour, nil)()
				time.Sleep(500 * time.Millisecond)
				cfg := slowConfig()
				cfg.SlowCallDuration = tt.d
				if err := b.Update(cfg); err != nil {
					t.Fatal(err)
				}
				time.Sleep(tt.trip - 500*time.Millisecond - 1)
				synctest.Wait()
				if tt.trip > 500*time.Millisecond {
					if s := b.State(); s != Closed {
						t.Fatalf("state %v before %v, want closed", s, tt.trip)
					}
				}
				time.Sleep(1)
				synctest.Wait()
				if s := b.State(); s != Open {
					t.Fatalf("state %v at %v, want open", s, tt.trip)
				}
			})
		})
	}
}

// SlowCallRatio and SlowCallMinCalls apply at the rule's next judgment,
// here a call that ends; the update itself trips nothing.
func TestUpdateSlowRatio(t *testing.T) {
	for _, tt := range []struct {
		name     string
		fast     int // fast calls before the slow ones
		from, to func(*Config)
	}{
		// 2 slow of 4, then of 5 as the call ends.
		{"SlowCallRatio", 2, func(c *Config) { c.SlowCallRatio = 0.9 }, func(c *Config) { c.SlowCallRatio = 0.4 }},
		// 2 slow of 2, then of 3.
		{"SlowCallMinCalls", 0, func(c *Config) { c.SlowCallMinCalls = 20 }, func(c *Config) { c.SlowCallMinCalls = 3 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				from, to := slowConfig(), slowConfig()
				tt.from(&from)
				tt.to(&to)
				b := newBreaker(t, from)
				for range tt.fast {
					call(b, nil)
				}
				// Deferred, so that a failed test still waits for them.
				defer goCall(b, time.Hour, nil)()
				defer goCall(b, time.Hour, nil)()
				time.Sleep(time.Second)
				synctest.Wait()
				if c := b.Counts(); b.State() != Closed || c.SlowCalls != 2 {
					t.Fatalf("state %v, counts %+v; want closed, 2 slow", b.State(), c)
				}
				if err := b.Update(to); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				if s := b.State(); s != Closed {
					t.Fatalf("state %v after Update, want closed: it trips nothing", s)
				}
				call(b, nil)
				if s := b.State(); s != Open {
					t.Fatalf("state %v after a call ended, want open", s)
				}
			})
		})
	}
}

// randomConfig returns a Config for the concurrent test, valid or not.
func randomConfig(r *rand.Rand) Config {
	return Config{
		ConsecutiveFailures: uint32(r.IntN(4)),
		FailureRatio:        []float64{0, 0.5, 1, -1}[r.IntN(4)],
		MinRequests:         uint32(r.IntN(5)),
		SlowCallRatio:       []float64{0.2, 0.7, 1, 0, math.NaN()}[r.IntN(5)],
		SlowCallDuration:    time.Duration(r.IntN(200)) * time.Millisecond,
		SlowCallMinCalls:    uint32(r.IntN(5)),
		Window:              time.Duration(r.IntN(3)) * time.Second,
		OpenTimeout:         time.Duration(r.IntN(200)-10) * time.Millisecond,
		HalfOpenRequests:    uint32(r.IntN(4)),
	}
}

// updateLoop updates b with random Configs until stop is closed, and
// checks each answer and Config against want, the Config in force.
func updateLoop(t *testing.T, b *Breaker, want Config, stop <-chan struct{}) {
	r := rand.New(rand.NewPCG(1, 2))
	for {
		select {
		case <-stop:
			return
		default:
		}
		cfg := randomConfig(r)
		_, newErr := New(cfg)
		err := b.Update(cfg)
		switch {
		case newErr != nil && (err == nil || err.Error() != newErr.Error()):
			t.Errorf("Update(%+v) = %v, want %v", cfg, err, newErr)
		case newErr == nil && cfg.SlowCallRatio == 0 && err == nil:
			t.Errorf("Update(%+v) turned the slow rule off", cfg)
		case err == nil:
			cfg.OnStateChange = want.OnStateChange
			want = cfg
		}
		if got := b.Config(); !sameConfig(got, want) {
			t.Errorf("Config() = %+v, want %+v", got, want)
		}
		time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
	}
}

// callLoop runs calls through b, each slow or failed at random, and checks
// that each ran or was rejected.
func callLoop(t *testing.T, b *Breaker, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 3))
	for range 300 {
		var fail error
		if r.IntN(3) == 0 {
			fail = errBoom
		}
		ran := false
		err := b.Execute(context.Background(), func(context.Context) error {
			ran = true
			time.Sleep(time.Duration(r.IntN(100)) * time.Millisecond)
			return fail
		})
		if ran != (err == fail) || !ran && !errors.Is(err, ErrOpen) {
			t.Errorf("Execute = %v, ran %v", err, ran)
		}
		time.Sleep(time.Duration(r.IntN(10)) * time.Millisecond)
	}
}

// Calls run from many goroutines while Updates, valid and invalid, come
// in a loop: every call runs or is rejected, an invalid Update changes
// nothing, Config always returns the last valid Config, the hook reports
// a chain of changes, and no probe place is lost.
func TestUpdateConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu   sync.Mutex
			last State
			bad  []string
		)
		hook := func(from, to State) {
			mu.Lock()
			if from != last {
				bad = append(bad, from.String()+"->"+to.String())
			}
			last = to
			mu.Unlock()
		}
		first := Config{ConsecutiveFailures: 2, SlowCallRatio: 0.5, SlowCallDuration: 50 * time.Millisecond,
			Window: time.Second, OpenTimeout: 100 * time.Millisecond, OnStateChange: hook}
		b := newBreaker(t, first)
		stop := make(chan struct{})
		var updates, calls sync.WaitGroup
		updates.Go(func() { updateLoop(t, b, first, stop) })
		for i := range 16 {
			calls.Go(func() { callLoop(t, b, uint64(i)) })
		}
		calls.Wait()
		close(stop)
		updates.Wait()
		// No probe place is lost: good calls close the breaker.
		for range 100 {
			if b.State() == Closed {
				break
			}
			time.Sleep(time.Second)
			call(b, nil)
		}
		if s := b.State(); s != Closed {
			t.Fatalf("state %v after 100 good calls a second apart, want closed", s)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("changes out of chain: %v", bad)
		}
	})
}

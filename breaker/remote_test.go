package breaker

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/watertight/watertight/policy"
)

// changeLog records OnStateChange calls.
type changeLog struct {
	mu sync.Mutex
	s  []string
}

func (l *changeLog) add(from, to State) {
	l.mu.Lock()
	l.s = append(l.s, from.String()+">"+to.String())
	l.mu.Unlock()
}

func (l *changeLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.s, " ")
}

func reason(err error) string {
	var re *policy.RejectedError
	if errors.As(err, &re) {
		return re.Reason
	}
	if err == nil {
		return "nil"
	}
	return err.Error()
}

func TestOpenUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log changeLog
		b := newBreaker(t, Config{OpenTimeout: 5 * time.Second, OnStateChange: log.add})
		b.OpenUntil(time.Now().Add(10 * time.Second))
		ran := false
		if err := b.Execute(context.Background(), func(context.Context) error { ran = true; return nil }); reason(err) != ReasonOpen || ran {
			t.Fatalf("held open: %v (ran %v)", err, ran)
		}
		if s := b.State(); s != Open {
			t.Fatalf("State %v, want open", s)
		}
		time.Sleep(10*time.Second - time.Nanosecond)
		if s := b.State(); s != Open {
			t.Fatalf("State %v just before until, want open", s)
		}
		time.Sleep(time.Nanosecond)
		if s := b.State(); s != HalfOpen {
			t.Fatalf("State %v at until, want half-open", s)
		}
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("probe: %v", err)
		}
		if s := b.State(); s != Closed {
			t.Fatalf("State %v after a good probe, want closed", s)
		}
		if got := log.String(); got != "closed>open open>half-open half-open>closed" {
			t.Fatalf("changes %q", got)
		}
		// Closed with a fresh machine: its own rules apply again.
		for range 5 {
			b.Execute(context.Background(), func(context.Context) error { return errBoom })
		}
		if s := b.State(); s != Open {
			t.Fatalf("State %v after 5 failures, want open", s)
		}
	})
}

func TestOpenUntilProbeFailsReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log changeLog
		b := newBreaker(t, Config{OpenTimeout: 5 * time.Second, OnStateChange: log.add})
		b.OpenUntil(time.Now()) // already past: half-open at once
		if s := b.State(); s != HalfOpen {
			t.Fatalf("State %v, want half-open", s)
		}
		if err := b.Execute(context.Background(), func(context.Context) error { return errBoom }); err != errBoom {
			t.Fatalf("probe: %v", err)
		}
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); reason(err) != ReasonOpen {
			t.Fatalf("after a failed probe: %v", err)
		}
		time.Sleep(5 * time.Second)
		if s := b.State(); s != HalfOpen {
			t.Fatalf("State %v OpenTimeout after the failed probe, want half-open", s)
		}
		if got := log.String(); got != "closed>half-open half-open>open open>half-open" {
			t.Fatalf("changes %q", got)
		}
	})
}

// TestGateProbes: with a gate, the breaker's own trip is held, and in
// half-open only the calls the gate lets through probe.
func TestGateProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log changeLog
		b := newBreaker(t, Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, OnStateChange: log.add})
		var allow bool
		var asked int
		b.GateProbes(func(ctx context.Context) bool {
			if ctx == nil {
				t.Error("gate asked without a ctx")
			}
			asked++
			return allow
		})
		b.Execute(context.Background(), func(context.Context) error { return errBoom })
		if s := b.State(); s != Open {
			t.Fatalf("State %v after the trip, want open", s)
		}
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); reason(err) != ReasonOpen || asked != 0 {
			t.Fatalf("open: %v, gate asked %d times", err, asked)
		}
		time.Sleep(time.Second)
		ran := false
		if err := b.Execute(context.Background(), func(context.Context) error { ran = true; return nil }); reason(err) != ReasonHalfOpenFull || ran || asked != 1 {
			t.Fatalf("gate closed: %v, ran %v, asked %d", err, ran, asked)
		}
		if s := b.State(); s != HalfOpen {
			t.Fatalf("State %v, want half-open", s)
		}
		allow = true
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("gate open: %v", err)
		}
		if got := log.String(); got != "closed>open open>half-open half-open>closed" {
			t.Fatalf("changes %q", got)
		}
		b.GateProbes(nil)
		b.Execute(context.Background(), func(context.Context) error { return errBoom })
		time.Sleep(time.Second)
		allow = false
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("gate removed: %v", err)
		}
	})
}

// TestHeldProbePlaces: HalfOpenRequests places; an excluded outcome frees
// one; a panicking probe reopens and frees it; Reset and ForceOpen.
func TestHeldProbePlaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{OpenTimeout: time.Second, HalfOpenRequests: 2})
		b.OpenUntil(time.Now())
		ctx := context.Background()
		_, t1, err1 := b.Enter(ctx)
		_, t2, err2 := b.Enter(ctx)
		_, _, err3 := b.Enter(ctx)
		if err1 != nil || err2 != nil || reason(err3) != ReasonHalfOpenFull {
			t.Fatalf("places: %v %v %v", err1, err2, err3)
		}
		b.Exit(ctx, t1, context.Canceled) // excluded: frees a place
		_, t3, err := b.Enter(ctx)
		if err != nil {
			t.Fatalf("freed place: %v", err)
		}
		if err := b.Execute(ctx, func(context.Context) error { panic("probe") }); reason(err) != ReasonHalfOpenFull {
			t.Fatalf("both places taken: %v", err)
		}
		b.Exit(ctx, t2, nil)
		if s := b.State(); s != HalfOpen {
			t.Fatalf("one success of two: %v", s)
		}
		b.Exit(ctx, t3, nil)
		if s := b.State(); s != Closed {
			t.Fatalf("two successes: %v", s)
		}

		// A panicking probe counts as a failure: open again, place freed.
		b.OpenUntil(time.Now())
		func() {
			defer func() {
				if recover() == nil {
					t.Error("panic swallowed")
				}
			}()
			b.Execute(ctx, func(context.Context) error { panic("probe") })
		}()
		if s := b.State(); s != Open {
			t.Fatalf("after a panicking probe: %v", s)
		}

		// A stale probe's outcome is ignored after a new OpenUntil.
		b.OpenUntil(time.Now())
		_, stale, _ := b.Enter(ctx)
		b.OpenUntil(time.Now().Add(time.Hour))
		b.Exit(ctx, stale, nil)
		if s := b.State(); s != Open {
			t.Fatalf("stale probe closed it: %v", s)
		}
		// ForceOpen wins over a hold; Reset ends both.
		b.OpenUntil(time.Now())
		b.ForceOpen()
		if err := b.Execute(ctx, func(context.Context) error { return nil }); reason(err) != ReasonOpen {
			t.Fatalf("forced over a hold: %v", err)
		}
		b.Reset()
		if err := b.Execute(ctx, func(context.Context) error { return nil }); err != nil || b.State() != Closed {
			t.Fatalf("after Reset: %v %v", err, b.State())
		}
	})
}

// TestHoldStorm: concurrent calls, OpenUntil, Reset and gate flips leave a
// consistent breaker: no probe place leaks (a final OpenUntil in the past
// admits HalfOpenRequests probes).
func TestHoldStorm(t *testing.T) {
	b := newBreaker(t, Config{ConsecutiveFailures: 2, OpenTimeout: time.Millisecond, HalfOpenRequests: 2})
	b.GateProbes(func(context.Context) bool { return true })
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 8 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				func() {
					defer func() { recover() }()
					b.Execute(context.Background(), func(context.Context) error {
						switch (n + i) % 4 {
						case 0:
							return errBoom
						case 1:
							panic("x")
						case 2:
							return context.Canceled
						}
						return nil
					})
				}()
			}
		})
	}
	wg.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			switch n % 3 {
			case 0:
				b.OpenUntil(time.Now().Add(time.Duration(n%5) * time.Millisecond))
			case 1:
				b.Reset()
			}
			b.State()
			time.Sleep(100 * time.Microsecond)
		}
	})
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	b.OpenUntil(time.Now())
	ctx := context.Background()
	_, _, e1 := b.Enter(ctx)
	_, _, e2 := b.Enter(ctx)
	if e1 != nil || e2 != nil {
		t.Fatalf("probe places leaked: %v %v", e1, e2)
	}
}

// TestHoldProperty: random sequences of OpenUntil, Reset, ForceOpen,
// gate flips, sleeps, admissions and outcomes (in a synctest bubble) keep
// a hold's accounting exact: the probe places its machine counts taken are
// its probes still in flight and its successes, never more than
// HalfOpenRequests, no call is admitted while a hold is open, and once every
// call has ended a hold starting now admits exactly HalfOpenRequests probes.
func TestHoldProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			n := rapid.Uint32Range(1, 3).Draw(rt, "halfOpen")
			b, err := New(Config{ConsecutiveFailures: 2, OpenTimeout: time.Second, HalfOpenRequests: n})
			if err != nil {
				rt.Fatal(err)
			}
			defer b.Close()
			gateOpen := true
			ctx := context.Background()
			type call struct {
				p Permit
				m *machine // the machine that admitted it
			}
			var live []call
			check := func() {
				m := b.cb.Load()
				if !m.held || b.forced.Load() {
					return
				}
				var inFlight uint32
				for _, c := range live {
					if c.m == m {
						inFlight++
					}
				}
				c := m.TwoStepCircuitBreaker.Counts()
				if taken := c.Requests - c.TotalExclusions; taken != inFlight+c.TotalSuccesses || taken > n {
					rt.Fatalf("hold counts %d places taken, %d probes in flight and %d successes, limit %d", taken, inFlight, c.TotalSuccesses, n)
				}
			}
			rt.Repeat(map[string]func(*rapid.T){
				"openUntil": func(rt *rapid.T) {
					d := rapid.IntRange(-2, 3).Draw(rt, "halves")
					b.OpenUntil(time.Now().Add(time.Duration(d) * 500 * time.Millisecond))
				},
				"reset":     func(*rapid.T) { b.Reset() },
				"forceOpen": func(*rapid.T) { b.ForceOpen() },
				"gate": func(rt *rapid.T) {
					switch rapid.IntRange(0, 2).Draw(rt, "gate") {
					case 0:
						b.GateProbes(nil)
					case 1:
						gateOpen = !gateOpen
						fallthrough
					default:
						b.GateProbes(func(context.Context) bool { return gateOpen })
					}
				},
				"sleep": func(rt *rapid.T) {
					time.Sleep(time.Duration(rapid.IntRange(0, 1500).Draw(rt, "ms")) * time.Millisecond)
				},
				"enter": func(rt *rapid.T) {
					m := b.cb.Load()
					heldOpen := m.held && !b.forced.Load() && time.Now().UnixNano() < m.until
					_, tok, err := b.Enter(ctx)
					if err == nil {
						if heldOpen {
							rt.Fatal("admitted while a hold is open")
						}
						live = append(live, call{tok, b.cb.Load()})
					}
				},
				"exit": func(rt *rapid.T) {
					if len(live) == 0 {
						rt.Skip("nothing in flight")
					}
					i := rapid.IntRange(0, len(live)-1).Draw(rt, "which")
					outcome := []error{nil, errBoom, context.Canceled, policy.ErrAborted}[rapid.IntRange(0, 3).Draw(rt, "outcome")]
					c := live[i]
					live = append(live[:i], live[i+1:]...)
					b.Exit(ctx, c.p, outcome)
				},
				"": func(*rapid.T) { check() },
			})
			for _, c := range live {
				b.Exit(ctx, c.p, context.Canceled)
			}
			live = nil
			b.Reset()
			b.GateProbes(nil)
			b.OpenUntil(time.Now())
			for i := range n + 1 {
				_, tok, err := b.Enter(ctx)
				if (err == nil) != (i < n) {
					rt.Fatalf("probe %d of %d after every call ended: %v", i+1, n, err)
				}
				if err == nil {
					live = append(live, call{tok, nil})
				}
			}
		})
	})
}

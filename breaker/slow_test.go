package breaker

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/watertight/watertight/internal/stage"
)

// slowConfig is a breaker whose only rule that can trip in these tests is
// the slow rule: half of at least 4 calls slower than 1s.
func slowConfig() Config {
	return Config{ConsecutiveFailures: 1 << 30, SlowCallRatio: 0.5, SlowCallDuration: time.Second,
		SlowCallMinCalls: 4, Window: time.Hour, OpenTimeout: time.Minute}
}

// goCall runs a call through b on a goroutine of its own: fn sleeps d and
// returns err. The returned function waits for Execute and returns its
// error.
func goCall(b *Breaker, d time.Duration, err error) func() error {
	var wg sync.WaitGroup
	var got error
	wg.Go(func() {
		got = b.Execute(context.Background(), func(context.Context) error {
			time.Sleep(d)
			return err
		})
	})
	return func() error { wg.Wait(); return got }
}

// Two fast calls, then two that hang: the breaker opens the moment the
// hanging ones pass SlowCallDuration (2 slow of 4 calls), not when they
// end, and their successes still reach their callers.
func TestSlowCallsTripWhileRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, slowConfig())
		for range 2 {
			if err, _ := call(b, nil); err != nil {
				t.Fatal(err)
			}
		}
		wait1 := goCall(b, time.Hour, nil)
		wait2 := goCall(b, time.Hour, nil)
		time.Sleep(time.Second - time.Nanosecond)
		synctest.Wait()
		if s := b.State(); s != Closed {
			t.Fatalf("state %v before the calls passed 1s, want closed", s)
		}
		if c := b.Counts(); c.SlowCalls != 0 {
			t.Fatalf("SlowCalls = %d before 1s, want 0", c.SlowCalls)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if s := b.State(); s != Open {
			t.Fatalf("state %v at 1s, want open", s)
		}
		if err, ran := call(b, nil); ran || err == nil {
			t.Fatalf("a call ran through the open breaker: %v", err)
		}
		if err := wait1(); err != nil {
			t.Errorf("slow call 1 = %v, want its success", err)
		}
		if err := wait2(); err != nil {
			t.Errorf("slow call 2 = %v, want its success", err)
		}
	})
}

// Below SlowCallMinCalls nothing trips, however slow the calls; a call
// slower than SlowCallDuration that ended counts as slow too; a fast call
// that brings the calls to the minimum trips the breaker as it ends.
func TestSlowRuleMinCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, slowConfig())
		if err := goCall(b, 2*time.Second, nil)(); err != nil {
			t.Fatal(err)
		}
		if err := goCall(b, 2*time.Second, nil)(); err != nil {
			t.Fatal(err)
		}
		if err := goCall(b, 1500*time.Millisecond, errBoom)(); err != errBoom {
			t.Fatal(err)
		}
		c := b.Counts()
		if s := b.State(); s != Closed || c.SlowCalls != 3 {
			t.Fatalf("state %v, SlowCalls %d after 3 slow calls; want closed, 3", s, c.SlowCalls)
		}
		// The 4th call, fast, reaches the minimum as it ends: 3 of 4.
		call(b, nil)
		if s := b.State(); s != Open {
			t.Fatalf("state %v after a fast call brought 3 slow calls to 4, want open", s)
		}
	})
}

// The slow rule judges the share: 1 slow call of 4 stays under 0.5.
func TestSlowRuleRatio(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, slowConfig())
		for range 3 {
			call(b, nil)
		}
		goCall(b, 2*time.Second, nil)()
		if c := b.Counts(); b.State() != Closed || c.SlowCalls != 1 || c.TotalSuccesses != 4 {
			t.Fatalf("state %v, counts %+v; want closed, 1 slow of 4 successes", b.State(), c)
		}
		goCall(b, 2*time.Second, nil)() // 2 of 5: still under
		if s := b.State(); s != Closed {
			t.Fatalf("state %v at 2 slow of 5, want closed", s)
		}
		goCall(b, 2*time.Second, nil)() // 3 of 6
		if s := b.State(); s != Open {
			t.Fatalf("state %v at 3 slow of 6, want open", s)
		}
	})
}

// Slow calls are counted in the window of their admission, and forgotten
// with it.
func TestSlowCallsAgeOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := slowConfig()
		cfg.Window = 10 * time.Second
		b := newBreaker(t, cfg)
		goCall(b, 2*time.Second, nil)()
		goCall(b, 2*time.Second, nil)()
		if c := b.Counts(); c.SlowCalls != 2 {
			t.Fatalf("SlowCalls = %d, want 2", c.SlowCalls)
		}
		time.Sleep(10 * time.Second)
		if c := b.Counts(); c.SlowCalls != 0 || c.TotalSuccesses != 0 {
			t.Fatalf("counts %+v a window later, want none", c)
		}
		// Two more slow and two fast: 2 of 4 in the window, not 4 of 6.
		call(b, nil)
		goCall(b, 2*time.Second, nil)()
		call(b, nil)
		if s := b.State(); s != Closed {
			t.Fatalf("state %v at 1 slow of 3, want closed", s)
		}
		goCall(b, 2*time.Second, nil)()
		if s := b.State(); s != Open {
			t.Fatalf("state %v at 2 slow of 4, want open", s)
		}
	})
}

// While half-open, a probe that turns slow opens the breaker again the
// moment it passes SlowCallDuration.
func TestSlowProbeReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, slowConfig())
		b.OpenUntil(time.Now())
		if s := b.State(); s != HalfOpen {
			t.Fatalf("state %v, want half-open", s)
		}
		wait := goCall(b, time.Hour, nil)
		time.Sleep(time.Second)
		synctest.Wait()
		if s := b.State(); s != Open {
			t.Fatalf("state %v with a probe running 1s, want open", s)
		}
		if err := wait(); err != nil {
			t.Fatalf("the slow probe = %v, want its success", err)
		}
		time.Sleep(time.Minute)
		if err := goCall(b, 10*time.Millisecond, nil)(); err != nil || b.State() != Closed {
			t.Fatalf("a fast probe: %v, state %v; want nil, closed", err, b.State())
		}
	})
}

// A call whose answer is marked on Begin's context is timed to it: a
// stream answered at once and read for an hour is not slow; one whose
// first byte comes after 2s is, the moment it passes 1s.
func TestSlowRuleTimesToTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, slowConfig())
		stream := func(firstByte, rest time.Duration) {
			p, err := b.Allow(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			ctx := p.Begin(context.Background())
			stage.Answered(ctx) // the headers: not what the rule waits for
			time.Sleep(firstByte)
			stage.FirstByte(ctx)
			time.Sleep(rest)
			p.Done(nil)
		}
		for range 4 {
			stream(time.Millisecond, time.Hour)
		}
		if c := b.Counts(); c.SlowCalls != 0 || b.State() != Closed {
			t.Fatalf("counts %+v after answered streams, want no slow call", c)
		}
		for range 3 {
			stream(2*time.Second, 0)
		}
		if c := b.Counts(); c.SlowCalls != 3 || b.State() != Closed {
			t.Fatalf("state %v, counts %+v after 3 late first bytes, want closed, 3 slow", b.State(), c)
		}
		stream(2*time.Second, 0) // 4 of 8
		if s := b.State(); s != Open {
			t.Fatalf("state %v after 4 late first bytes, want open", s)
		}
	})
}

// watertight.breaker.slow counts each call judged slow.
func TestSlowTelemetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
		cfg := slowConfig()
		cfg.Name, cfg.MeterProvider = "llm", mp
		b := newBreaker(t, cfg)
		goCall(b, 2*time.Second, nil)()
		call(b, nil)
		goCall(b, 3*time.Second, errBoom)()
		got := points(t, r, "watertight.breaker.slow")
		want := attrs("watertight.policy.kind", "breaker", "watertight.policy.name", "llm")
		if len(got) != 1 || got[want] != 2 {
			t.Fatalf("watertight.breaker.slow = %v, want 2 at %s", got, want)
		}
	})
}

// As older calls leave the window, the share of slow calls can reach the
// ratio with no call turning slow: the breaker opens then, by its timer.
func TestSlowRuleTripsAsTheWindowRolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := slowConfig()
		cfg.Window = 10 * time.Second
		b := newBreaker(t, cfg)
		for range 6 {
			call(b, nil)
		}
		time.Sleep(5 * time.Second)
		var waits []func() error
		for range 4 {
			waits = append(waits, goCall(b, time.Hour, nil))
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if c := b.Counts(); c.SlowCalls != 4 || b.State() != Closed {
			t.Fatalf("state %v, counts %+v at 6s; want closed with 4 slow of 10", b.State(), c)
		}
		// The 6 fast calls leave the window at 10s: 4 slow of 4.
		time.Sleep(4*time.Second - time.Nanosecond)
		synctest.Wait()
		if s := b.State(); s != Closed {
			t.Fatalf("state %v just before 10s, want closed", s)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if s := b.State(); s != Open {
			t.Fatalf("state %v at 10s, want open", s)
		}
		for _, w := range waits {
			w()
		}
	})
}

// Calls that end at one instant are never counted twice: 3 slow calls
// ending together stay below SlowCallMinCalls 4, whatever the order in
// which their ends and the judgments interleave.
func TestSlowRuleNeverBelowMinCalls(t *testing.T) {
	for range 200 {
		synctest.Test(t, func(t *testing.T) {
			b := newBreaker(t, slowConfig())
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					b.Execute(context.Background(), func(context.Context) error { time.Sleep(2 * time.Second); return nil })
				})
			}
			wg.Wait()
			if s := b.State(); s != Closed {
				t.Fatalf("state %v after 3 calls with SlowCallMinCalls 4, want closed", s)
			}
		})
	}
}

// A Window that is no multiple of 10 ns still has 10 buckets, for
// outcomes and slow calls alike: both are forgotten together.
func TestSlowWindowOfAnyLength(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := slowConfig()
		cfg.Window = 10*time.Second + 9
		b := newBreaker(t, cfg)
		goCall(b, 2*time.Second, nil)()
		if c := b.Counts(); c.TotalSuccesses != 1 || c.SlowCalls != 1 {
			t.Fatalf("counts %+v; want the slow success", c)
		}
		time.Sleep(8500 * time.Millisecond) // 10.5 s: the first bucket is gone
		if c := b.Counts(); c.TotalSuccesses != 0 || c.SlowCalls != 0 {
			t.Fatalf("counts %+v after the Window; want none", c)
		}
	})
}

// A call that hangs is judged before its bucket leaves the window, with
// SlowCallDuration at its largest, 9/10 of the Window.
func TestSlowCallJudgedWithinTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{ConsecutiveFailures: 1 << 30, SlowCallRatio: 1, SlowCallDuration: 9 * time.Second,
			SlowCallMinCalls: 1, Window: 10 * time.Second, OpenTimeout: time.Minute})
		time.Sleep(999 * time.Millisecond) // the end of the first bucket
		wait := goCall(b, time.Hour, nil)
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if s := b.State(); s != Open {
			t.Fatalf("state %v with a call hanging 9 s, want open", s)
		}
		b.Reset()
		wait()
	})
}

// After a burst, the watch does not keep the burst's buffer.
func TestSlowWatchShrinks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := slowConfig()
		cfg.SlowCallMinCalls = 1 << 30
		b := newBreaker(t, cfg)
		var ps []Permit
		for range 100000 {
			p, err := b.Allow(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		for i := range ps {
			ps[i].Done(nil)
		}
		call(b, nil)
		b.slow.mu.Lock()
		n := cap(b.slow.buf)
		b.slow.mu.Unlock()
		if n > 1024 {
			t.Fatalf("the watch keeps room for %d calls after the burst", n)
		}
	})
}

package adaptive_test

import (
	"context"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/policy"
)

func withPriority(p policy.Priority) context.Context {
	return policy.WithPriority(context.Background(), p)
}

func TestReserveValidatedAgainstMaxLimit(t *testing.T) {
	for _, tt := range []struct {
		reserve map[policy.Priority]int
		want    string
	}{
		{map[policy.Priority]int{policy.PrioritySheddable: 1}, "adaptive: Config.Reserve[sheddable]"},
		{map[policy.Priority]int{policy.PriorityCritical: -1}, "adaptive: Config.Reserve[critical] must be >= 0"},
		{map[policy.Priority]int{policy.PriorityCritical: 4}, "adaptive: Config.Reserve[critical] = 4 leaves no slot of 4 open"},
		{map[policy.Priority]int{policy.PriorityCritical: math.MaxInt, policy.PriorityDefault: math.MaxInt}, "adaptive: Config.Reserve[default]"},
	} {
		l, err := adaptive.New(adaptive.Config{MaxLimit: 4, Reserve: tt.reserve})
		if l != nil || err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("New(Reserve %v) = %v, %v; want an error starting %q", tt.reserve, l, err, tt.want)
		}
	}
	mustNew(t, adaptive.Config{MinLimit: 1, MaxLimit: 4, Reserve: map[policy.Priority]int{policy.PriorityCritical: 3}})
}

// At a limit no higher than the reserve, only the higher priority runs, and
// a critical call takes a sheddable waiter's place in the full queue.
func TestLowerPrioritiesGoFirstAtTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{Name: "llm", MinLimit: 3, MaxLimit: 3, MaxQueue: 1,
			Reserve: map[policy.Priority]int{policy.PriorityCritical: 1}})
		k := newBlocker(l)
		k.start(withPriority(policy.PrioritySheddable), "s1")
		k.start(withPriority(policy.PrioritySheddable), "s2")
		k.start(withPriority(policy.PrioritySheddable), "s3") // waits: the last slot is critical's
		checkCounts(t, l, 2, 1)
		k.start(withPriority(policy.PriorityCritical), "c1")
		k.start(withPriority(policy.PriorityCritical), "c2") // sheds s3
		checkRejection(t, <-k.errs, "llm", adaptive.ReasonShed)
		k.release("s1")
		if got, want := k.order(), "s1,s2,c1,c2"; got != want {
			t.Fatalf("ran %s; want %s", got, want)
		}
		for _, n := range []string{"s2", "c1", "c2"} {
			k.release(n)
		}
		checkCounts(t, l, 0, 0)
	})
}

// The reserve applies to a probe's cap too: during the probe that starts
// at New, a default call finds every slot it may take reserved, and a
// critical call runs.
func TestReserveAppliesDuringTheFirstProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{Name: "x", Reserve: map[policy.Priority]int{policy.PriorityCritical: 3}})
		err := l.Execute(context.Background(), func(context.Context) error { return nil })
		checkRejection(t, err, "x", adaptive.ReasonFull)
		if err := l.Execute(withPriority(policy.PriorityCritical), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("critical call during the probe: %v", err)
		}
	})
}

// A reserve does not stop the limit from learning: calls that can never
// take the reserves above them still reach their share of the limit, and a
// dependency of capacity 10 overloaded by them lowers it from 40, as it
// does without a reserve.
func TestReserveLearnsFromLowerPriorities(t *testing.T) {
	for _, tc := range []struct {
		p       policy.Priority
		reserve map[policy.Priority]int
	}{
		{policy.PriorityDefault, nil},
		{policy.PriorityDefault, map[policy.Priority]int{policy.PriorityCritical: 2}},
		{policy.PrioritySheddable, map[policy.Priority]int{policy.PriorityCritical: 1, policy.PriorityDefault: 1}},
	} {
		synctest.Test(t, func(t *testing.T) {
			reserve := tc.reserve
			l := mustNew(t, adaptive.Config{InitialLimit: 40, MaxQueue: 10, Reserve: reserve})
			dep := &fluid{lat: func(n int64) time.Duration { return 20 * time.Millisecond * time.Duration(max(n, 10)) / 10 }}
			var wg sync.WaitGroup
			for range 3000 { // 1 000 calls a second for 3 s
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(withPriority(tc.p), time.Second)
					defer cancel()
					_ = l.Execute(ctx, dep.call)
				})
				time.Sleep(time.Millisecond)
			}
			wg.Wait()
			t.Logf("%v calls, Reserve %v: Limit() = %d after 3 s", tc.p, reserve, l.Limit())
			if got := l.Limit(); got > 20 {
				t.Errorf("%v calls, Reserve %v: Limit() = %d after 3 s of overload; want at most 20", tc.p, reserve, got)
			}
		})
	}
}

// Calls below reserves of 3 or more never run in a probe: alone, they are
// never measured, and the limit stays where it is, as Config.Reserve says.
func TestReserveAboveTheProbeCapIsNeverMeasured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{InitialLimit: 40, MaxQueue: 10, Reserve: map[policy.Priority]int{policy.PriorityCritical: 3}})
		dep := &fluid{lat: func(n int64) time.Duration { return 20 * time.Millisecond * time.Duration(max(n, 10)) / 10 }}
		var wg sync.WaitGroup
		for range 3000 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = l.Execute(ctx, dep.call)
			})
			time.Sleep(time.Millisecond)
		}
		wg.Wait()
		if got, st := l.Limit(), l.State(); got != 40 || st.Measured {
			t.Errorf("Limit() = %d, measured %v; want 40 and never measured", got, st.Measured)
		}
	})
}

// offer runs n calls of priority p through l, one every gap, against dep,
// and reports how many failed.
func offer(l *adaptive.Limiter, dep *fluid, p policy.Priority, n int, gap time.Duration) int64 {
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(withPriority(p), time.Second)
			defer cancel()
			if l.Execute(ctx, dep.call) != nil {
				failed.Add(1)
			}
		})
		time.Sleep(gap)
	}
	wg.Wait()
	return failed.Load()
}

// Calls below a reserve raise the limit as others do: a healthy dependency
// wanted at about 20 calls in flight by default calls lifts a limit that
// starts at most twice the reserve above it.
func TestReserveLimitGrowsFromLowerPriority(t *testing.T) {
	for _, tc := range []struct{ r, initial int }{{2, 3}, {5, 9}, {10, 19}} {
		synctest.Test(t, func(t *testing.T) {
			l := mustNew(t, adaptive.Config{InitialLimit: tc.initial, MaxQueue: 10, Reserve: map[policy.Priority]int{policy.PriorityCritical: tc.r}})
			dep := &fluid{lat: func(int64) time.Duration { return 20 * time.Millisecond }}
			offer(l, dep, policy.PriorityCritical, 100, 10*time.Millisecond) // a probe measures
			failed := offer(l, dep, policy.PriorityDefault, 10000, time.Millisecond)
			if l.Limit() <= tc.initial {
				t.Errorf("Reserve %d, InitialLimit %d: Limit() = %d after 10 s of default calls wanting 20 slots (%d of 10000 failed)", tc.r, tc.initial, l.Limit(), failed)
			}
		})
	}
}

// After an overload by default calls, a limit with a reserve learns back
// up once the dependency heals.
func TestReserveLimitRecoversAfterOverload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{InitialLimit: 40, MaxQueue: 10, Reserve: map[policy.Priority]int{policy.PriorityCritical: 10}})
		var healthy atomic.Bool
		dep := &fluid{lat: func(n int64) time.Duration {
			if healthy.Load() {
				return 20 * time.Millisecond
			}
			return 20 * time.Millisecond * time.Duration(max(n, 1))
		}}
		offer(l, dep, policy.PriorityCritical, 200, 10*time.Millisecond)
		offer(l, dep, policy.PriorityDefault, 6000, time.Millisecond)
		low := l.Limit()
		healthy.Store(true)
		offer(l, dep, policy.PriorityDefault, 10000, time.Millisecond)
		if l.Limit() < 20 {
			t.Errorf("Limit() = %d after the overload (%d), 10 s healthy at 20 calls in flight; want at least 20", l.Limit(), low)
		}
	})
}

// Critical calls alone do not reach a limit because of a reserve for
// them: four in flight under a limit of 9 keep it when the latency doubles,
// as without the reserve.
func TestReserveDoesNotLowerAnUnreachedLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{InitialLimit: 8, MaxQueue: 100, Reserve: map[policy.Priority]int{policy.PriorityCritical: 5}})
		var lat atomic.Int64
		lat.Store(int64(20 * time.Millisecond))
		dep := &fluid{lat: func(int64) time.Duration { return time.Duration(lat.Load()) }}
		ctx, stop := context.WithCancel(withPriority(policy.PriorityCritical))
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					_ = l.Execute(ctx, dep.call)
				}
			})
		}
		time.Sleep(5 * time.Second)
		before := l.Limit()
		lat.Store(int64(40 * time.Millisecond))
		low := before
		for range 1000 {
			time.Sleep(10 * time.Millisecond)
			low = min(low, l.Limit())
		}
		stop()
		wg.Wait()
		if low < before {
			t.Errorf("the limit fell from %d to %d with 4 critical calls in flight", before, low)
		}
	})
}

package breaker_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/watertight/watertight/breaker"
)

// The model's settings. Judgments fall at half milliseconds and bucket
// boundaries at multiples of 100.03 ms, calls start and end on whole
// milliseconds: no two kinds of event share an instant within the 5 s
// the calls span (the first tie, a judgment on a boundary, is at 5001.5 ms).
const (
	modelSlow   = 100*time.Millisecond + 500*time.Microsecond
	modelWindow = 1000*time.Millisecond + 300*time.Microsecond
	modelPeriod = modelWindow / 10
)

// modelCall is one call of the model: it starts at start, returns after
// dur with a success, a failure or context.Canceled (excluded).
type modelCall struct {
	start, dur time.Duration
	outcome    int // 0 success, 1 failure, 2 excluded
}

// TestSlowRuleModel checks the slow rule against a model of its
// documented semantics, in simulated time: the breaker opens at the first
// instant, among the judgments of slow calls, the window's rolls and the
// ends of calls, at which the calls admitted in the window that ended as a
// success or failure, plus those judged slow that did not, number at least
// SlowCallMinCalls, and the slow ones among them reach SlowCallRatio; and
// never before.
func TestSlowRuleModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ratio := rapid.SampledFrom([]float64{0.2, 0.5, 0.75, 1}).Draw(rt, "ratio")
		minCalls := rapid.IntRange(1, 6).Draw(rt, "minCalls")
		n := rapid.IntRange(1, 25).Draw(rt, "calls")
		calls := make([]modelCall, n)
		for i := range calls {
			calls[i] = modelCall{
				start:   time.Duration(rapid.IntRange(0, 3000).Draw(rt, "startMs")) * time.Millisecond,
				dur:     time.Duration(rapid.IntRange(1, 1500).Draw(rt, "durMs")) * time.Millisecond,
				outcome: rapid.IntRange(0, 2).Draw(rt, "outcome"),
			}
		}
		slices.SortStableFunc(calls, func(a, b modelCall) int { return int(a.start - b.start) })
		want, wantOK := modelTrip(calls, ratio, minCalls)
		got, gotOK := runSlowModel(rt, calls, ratio, minCalls)
		if gotOK != wantOK || (wantOK && got != want) {
			rt.Fatalf("breaker opened at %v (%v); model at %v (%v)", got, gotOK, want, wantOK)
		}
	})
}

// runSlowModel runs calls through a breaker with the slow rule and
// returns when it first opened.
func runSlowModel(rt *rapid.T, calls []modelCall, ratio float64, minCalls int) (time.Duration, bool) {
	var at time.Duration
	opened := false
	rapid.SyncTest(rt, func(rt *rapid.T) {
		start := time.Now()
		var mu sync.Mutex
		b, err := breaker.New(breaker.Config{ConsecutiveFailures: 1 << 30, OpenTimeout: time.Hour,
			SlowCallRatio: ratio, SlowCallDuration: modelSlow, SlowCallMinCalls: uint32(minCalls), Window: modelWindow,
			OnStateChange: func(_, to breaker.State) {
				mu.Lock()
				defer mu.Unlock()
				if to == breaker.Open && !opened {
					opened, at = true, time.Since(start)
				}
			}})
		if err != nil {
			rt.Fatal(err)
		}
		defer b.Close()
		var wg sync.WaitGroup
		for _, c := range calls {
			time.Sleep(c.start - time.Since(start))
			wg.Go(func() {
				b.Execute(context.Background(), func(context.Context) error {
					time.Sleep(c.dur)
					return [...]error{nil, errModel, context.Canceled}[c.outcome]
				})
			})
		}
		wg.Wait()
		time.Sleep(modelWindow) // the last judgments and rolls
	})
	return at, opened
}

var errModel = errorString("model failure")

type errorString string

func (e errorString) Error() string { return string(e) }

// modelTrip returns the first instant at which the rule holds, if any.
func modelTrip(calls []modelCall, ratio float64, minCalls int) (time.Duration, bool) {
	type event struct {
		at   time.Duration
		kind int // 0: call i ends, 1: call i is judged slow, 2: a roll
		i    int
	}
	var evs []event
	for i, c := range calls {
		evs = append(evs, event{c.start + c.dur, 0, i})
		if c.dur > modelSlow {
			evs = append(evs, event{c.start + modelSlow, 1, i})
		}
	}
	for k := 1; time.Duration(k)*modelPeriod < 6*time.Second; k++ {
		evs = append(evs, event{time.Duration(k) * modelPeriod, 2, -1})
	}
	// By instant; judgments of one instant in admission order.
	slices.SortStableFunc(evs, func(a, b event) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.i - b.i
	})
	judged := make([]bool, len(calls))
	ended := make([]bool, len(calls))
	age := func(d time.Duration) int { return int(d / modelPeriod) }
	for _, e := range evs {
		switch e.kind {
		case 0:
			ended[e.i] = true
		case 1:
			judged[e.i] = true
		}
		slow, n := 0, 0
		for i, c := range calls {
			if c.start > e.at || age(e.at)-age(c.start) >= 10 {
				continue // not admitted yet, or out of the window
			}
			counted := ended[i] && c.outcome != 2
			if counted || judged[i] {
				n++
			}
			if judged[i] {
				slow++
			}
		}
		// The rule is judged at a judgment, and at a roll or a counted end
		// while the window holds slow calls.
		check := e.kind == 1 || slow > 0 && (e.kind == 2 || calls[e.i].outcome != 2)
		if check && n >= minCalls && float64(slow)/float64(n) >= ratio {
			return e.at, true
		}
	}
	return 0, false
}

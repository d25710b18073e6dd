package retry

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"
)

// granted returns how many retries b grants in a row, now.
func granted(b *Budget) int {
	n := 0
	for b.TryWithdraw() {
		n++
	}
	return n
}

// A burst of 100 000 calls fades by e^-10 over ten Windows of silence: it
// pays for 20 000 x e^-10 = 0.9 retries on top of the reserve of 100,
// 100 retries in all.
func TestBudgetBurstFadesOverSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBudget(t, BudgetConfig{})
		for range 100000 {
			b.Deposit()
		}
		time.Sleep(10 * budgetWindow)
		if n := granted(b); n != 100 {
			t.Errorf("after ten Windows of silence the burst paid for %d retries, want 100 (100 + 20000 x e^-10)", n)
		}
	})
}

// 1 000 calls made just before an outage pay for their 200 retries in
// full, on top of the reserve of 100, however long the Budget was quiet
// before them.
func TestBudgetCallsBeforeOutagePayInFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBudget(t, BudgetConfig{})
		time.Sleep(10 * budgetWindow)
		for range 1000 {
			b.Deposit()
		}
		if n := granted(b); n != 300 {
			t.Errorf("1000 calls just before the outage paid for %d retries, want 300 (100 + 1000 x 0.2)", n)
		}
	})
}

// A deposit counts at the time it was made, however close to the last
// update: 1000 deposits made a moment after the first have faded by that
// moment less than the first.
func TestBudgetDepositsCountWhenMade(t *testing.T) {
	for _, window := range []time.Duration{10 * time.Second, time.Millisecond, 200 * time.Second} {
		fade := func(d time.Duration) float64 { return math.Exp(-d.Seconds() / window.Seconds()) }
		for _, after := range []time.Duration{time.Nanosecond, window / 64} {
			synctest.Test(t, func(t *testing.T) {
				b := mustBudgetWindow(t, BudgetConfig{Ratio: 1, MinPerSecond: noMinimum}, window)
				b.Deposit()
				time.Sleep(after)
				for range 1000 {
					b.Deposit()
				}
				want := fade(after) + 1000
				if got := b.Available(); math.Abs(got-want) > 1e-9*want {
					t.Errorf("Window %v: 1000 deposits %v after the first: Available = %v, want %v", window, after, got, want)
				}
			})
		}
	}
}

// budgetModel is the documented formula, computed apart from Budget: the
// balance at time t is Window x MinPerSecond, plus Ratio x e^(-(t-ti)/Window)
// for each deposit made at ti, minus e^(-(t-tj)/Window) for each retry
// granted at tj; a retry is granted when the balance is at least one.
type budgetModel struct {
	reserve  float64
	window   float64 // seconds
	deposits []budgetEvent
	grants   []float64 // times, in seconds
}

type budgetEvent struct {
	at float64 // seconds
	n  int
}

func (m *budgetModel) deposit(at float64, n int) { m.deposits = append(m.deposits, budgetEvent{at, n}) }

// balance returns the balance at t, with each deposit worth value instead
// of Ratio, and with the retries granted at the times in grants.
func (m *budgetModel) balance(t, value float64, grants []float64) float64 {
	v := m.reserve
	for _, d := range m.deposits {
		v += float64(d.n) * value * math.Exp(-(t-d.at)/m.window)
	}
	for _, g := range grants {
		v -= math.Exp(-(t - g) / m.window)
	}
	return v
}

// try grants a retry at t if the balance, with deposits worth value, is at
// least threshold.
func (m *budgetModel) try(t, value, threshold float64) bool {
	if m.balance(t, value, m.grants) < threshold {
		return false
	}
	m.grants = append(m.grants, t)
	return true
}

// TestBudgetMatchesFormula drives a Budget of a random configuration with
// deposits at random times and reads (TryWithdraw, Available) at random
// times, in a synctest bubble, and checks it against the formula computed
// here: after each step, Available is the formula for the Budget's own
// grants, and the Budget has granted as many retries as the formula
// grants, both to within rounding.
func TestBudgetMatchesFormula(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			ratio := rapid.SampledFrom([]float64{0.05, 0.2, 1, 3}).Draw(rt, "ratio")
			floor := rapid.SampledFrom([]float64{noMinimum, 0.5, 10}).Draw(rt, "minPerSecond")
			window := rapid.SampledFrom([]time.Duration{time.Millisecond, 40 * time.Millisecond,
				time.Second, 10 * time.Second, 200 * time.Second}).Draw(rt, "window")
			b, err := newBudget(BudgetConfig{Ratio: ratio, MinPerSecond: floor}, window)
			if err != nil {
				rt.Fatal(err)
			}
			if floor == noMinimum {
				floor = 0
			}
			short := min(max(window/64, time.Millisecond), time.Second)
			upper := &budgetModel{reserve: floor * window.Seconds(), window: window.Seconds()}
			lower := &budgetModel{reserve: upper.reserve, window: upper.window}
			var mine []float64 // the Budget's grants
			start := time.Now()
			for range rapid.IntRange(1, 100).Draw(rt, "steps") {
				var pause time.Duration
				switch rapid.IntRange(0, 3).Draw(rt, "pauseKind") {
				case 1: // a short pause: within Window/64, 1ms to 1s
					pause = time.Duration(rapid.Int64Range(1, int64(short)).Draw(rt, "pause"))
				case 2:
					pause = time.Duration(rapid.Int64Range(int64(short), 2*int64(short)).Draw(rt, "pause"))
				case 3: // up to a few Windows
					pause = time.Duration(rapid.Int64Range(int64(short), 5*int64(window)).Draw(rt, "pause"))
				}
				time.Sleep(pause)
				now := time.Since(start).Seconds()
				// The sums of many terms round: allow for it.
				eps := 1e-9 * (upper.reserve + float64(len(mine)) + upper.balance(now, ratio, nil))
				switch rapid.IntRange(0, 2).Draw(rt, "op") {
				case 0:
					n := rapid.IntRange(1, 300).Draw(rt, "deposits")
					for range n {
						b.Deposit()
					}
					upper.deposit(now, n)
					lower.deposit(now, n)
				case 1:
					for range rapid.IntRange(1, 40).Draw(rt, "withdrawals") {
						if b.TryWithdraw() {
							mine = append(mine, now)
						}
						upper.try(now, ratio, 1-eps)
						lower.try(now, ratio, 1+eps)
					}
				case 2:
					a := b.Available()
					want := upper.balance(now, ratio, mine)
					if math.Abs(a-want) > eps || a < 0 {
						rt.Fatalf("at %.6fs Available = %v, want %v", now, a, want)
					}
				}
				if g := len(mine); g < len(lower.grants) || g > len(upper.grants) {
					rt.Fatalf("at %.6fs the Budget has granted %d retries, the formula %d to %d",
						now, g, len(lower.grants), len(upper.grants))
				}
			}
		})
	})
}

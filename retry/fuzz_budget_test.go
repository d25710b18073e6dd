package retry_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/watertight/watertight/retry"
)

// FuzzBudgetConfig builds a BudgetConfig from fuzzed fields and checks that
// NewBudget never panics and returns an error, naming the first invalid
// field by the documented rules, exactly when one is invalid; a valid
// Budget starts at its reserve, never holds a negative or NaN balance, and
// grants no more withdrawals than its reserve plus what the deposits paid
// for.
func FuzzBudgetConfig(f *testing.F) {
	f.Add(0.0, 0.0, uint16(10), uint16(10))
	f.Add(0.2, -1.0, uint16(100), uint16(50))
	f.Add(math.NaN(), 0.0, uint16(1), uint16(1))
	f.Add(1e300, 1e300, uint16(1000), uint16(1000))
	f.Add(-1.0, -2.0, uint16(0), uint16(0))
	f.Add(1e-300, math.Inf(1), uint16(3), uint16(3))
	f.Fuzz(func(t *testing.T, ratio, minPerSecond float64, deposits, withdrawals uint16) {
		cfg := retry.BudgetConfig{Ratio: ratio, MinPerSecond: minPerSecond}
		want := ""
		r, floor, w := ratio, minPerSecond, 10*time.Second
		if r == 0 { // BudgetConfig's documented defaults
			r = 0.2
		}
		if floor == 0 {
			floor = 10
		} else if floor < 0 {
			floor = 0
		}
		switch {
		case !(r > 0) || math.IsInf(r, 0):
			want = "Ratio"
		case math.IsNaN(floor) || math.IsInf(floor, 0):
			want = "MinPerSecond"
		}
		b, err := retry.NewBudget(cfg)
		if want != "" {
			if err == nil || !strings.HasPrefix(err.Error(), "retry: BudgetConfig."+want+" ") {
				t.Fatalf("NewBudget(%+v) = %v; want an error naming %s", cfg, err, want)
			}
			return
		}
		if err != nil {
			t.Fatalf("NewBudget(%+v) = %v; want valid", cfg, err)
		}
		reserve := w.Seconds() * floor
		if a := b.Available(); math.IsNaN(a) || a < 0 || a > reserve*(1+1e-9) {
			t.Fatalf("Available = %v, reserve %v", a, reserve)
		}
		for range deposits {
			b.Deposit()
		}
		granted := 0
		for range withdrawals {
			if b.TryWithdraw() {
				granted++
			}
		}
		// Time passes during the test: the floor adds at most
		// MinPerSecond a second.
		if paid := reserve + r*float64(deposits) + floor*1 + 1e-9; float64(granted) > paid && !math.IsInf(paid, 1) {
			t.Fatalf("granted %d, paid %v", granted, paid)
		}
		if a := b.Available(); math.IsNaN(a) || a < 0 {
			t.Fatalf("Available = %v", a)
		}
	})
}

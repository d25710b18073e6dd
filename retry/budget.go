package retry

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// The defaults of [BudgetConfig]'s zero fields, those of Finagle's
// RetryBudget.
const (
	defaultBudgetRatio        = 0.2
	defaultBudgetMinPerSecond = 10.0
	budgetWindow              = 10 * time.Second // the time constant of fading
)

// BudgetConfig configures a [Budget]. The zero value is valid: retries of
// at most 20% of the calls of about the last 10 seconds, plus 10 a second.
// [NewBudget] copies it.
type BudgetConfig struct {
	// Ratio is the retries each call pays for. Zero means 0.2; otherwise
	// it must be finite and > 0.
	Ratio float64

	// MinPerSecond is the rate of retries granted whatever the traffic.
	// Zero means 10, and a negative value grants no retries beyond those
	// the calls pay for; otherwise it must be finite.
	MinPerSecond float64
}

// resolve returns cfg with its defaults filled in, MinPerSecond 0 meaning
// none, or an error naming the first invalid field.
func (cfg BudgetConfig) resolve() (BudgetConfig, error) {
	s := cfg
	if s.Ratio == 0 {
		s.Ratio = defaultBudgetRatio
	}
	if !(s.Ratio > 0) || math.IsInf(s.Ratio, 0) { // NaN fails too
		return s, fmt.Errorf("retry: BudgetConfig.Ratio must be a finite number > 0, got %v", cfg.Ratio)
	}
	switch {
	case s.MinPerSecond == 0:
		s.MinPerSecond = defaultBudgetMinPerSecond
	case s.MinPerSecond < 0:
		s.MinPerSecond = 0
	case !(s.MinPerSecond > 0) || math.IsInf(s.MinPerSecond, 0): // NaN fails too
		return s, fmt.Errorf("retry: BudgetConfig.MinPerSecond must be finite, got %v", cfg.MinPerSecond)
	}
	return s, nil
}

// Budget bounds the retries of the calls that share it. Each call deposits
// Ratio of a retry, and each retry withdraws one. With W = 10s, at time t
// the balance is
//
//	W x MinPerSecond
//	+ Ratio x e^(-(t-ti)/W)  for each deposit, made at ti
//	- e^(-(t-tj)/W)          for each retry granted, at tj
//
// A retry is granted only when the balance holds a whole one, so the
// balance is never negative. It never exceeds 2^53.
//
// Deposit, TryWithdraw and Available each take a mutex and bring the
// balance up to now, so every deposit and retry counts at the time it was
// made. The deposits of one instant join the balance as their count x
// Ratio, so that rounding does not shave what they pay for.
//
// The zero Budget is not usable: build one with [NewBudget]. A Budget is
// safe for concurrent use. With testing/synctest, build it in the bubble
// that uses it.
type Budget struct {
	s       BudgetConfig // resolved
	window  time.Duration
	start   time.Time
	reserve float64 // window x MinPerSecond, in retries

	mu      sync.Mutex
	balance float64       // as of at, without made
	at      time.Duration // since start
	made    int64         // deposits made at at
}

// budgetMaxBalance caps the balance, so that absurd settings cannot make
// it infinite, and then NaN.
const budgetMaxBalance = 1 << 53

// NewBudget returns a Budget configured by cfg, or an error naming the
// first invalid field of cfg. Its balance starts at 10s x MinPerSecond.
func NewBudget(cfg BudgetConfig) (*Budget, error) {
	return newBudget(cfg, budgetWindow)
}

func newBudget(cfg BudgetConfig, window time.Duration) (*Budget, error) {
	s, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	reserve := min(window.Seconds()*s.MinPerSecond, budgetMaxBalance)
	return &Budget{s: s, window: window, start: time.Now(), reserve: reserve, balance: reserve}, nil
}

// Deposit records one call. A [Retry] or a hedge.Hedge with this Budget calls
// it as each call starts. Call it for calls made outside them that should
// pay for retries.
func (b *Budget) Deposit() {
	b.mu.Lock()
	if now := time.Since(b.start); now > b.at {
		b.update(now)
	}
	b.made++
	b.mu.Unlock()
}

// TryWithdraw takes one retry from the balance and returns true, or
// returns false if the balance holds less than one. A [Retry] or a hedge.Hedge
// with this Budget calls it before each retry or hedge. Call it before a
// retry made outside them, and do not retry if it returns false.
func (b *Budget) TryWithdraw() bool {
	b.mu.Lock()
	b.update(time.Since(b.start))
	ok := b.balance >= 1
	if ok {
		b.balance--
	}
	b.mu.Unlock()
	return ok
}

// Available returns the retries the balance holds now.
func (b *Budget) Available() float64 {
	b.mu.Lock()
	b.update(time.Since(b.start))
	v := b.balance
	b.mu.Unlock()
	return v
}

// update brings the balance to now: the deposits made at b.at join it,
// then its distance from the reserve decays. b.mu must be held.
func (b *Budget) update(now time.Duration) {
	b.balance = min(b.balance+float64(b.made)*b.s.Ratio, budgetMaxBalance)
	b.made = 0
	if dt := now - b.at; dt > 0 {
		b.at = now
		b.balance = b.reserve + (b.balance-b.reserve)*math.Exp(-float64(dt)/float64(b.window))
	}
}

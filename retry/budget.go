package retry

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for the zero values of [BudgetConfig] fields, those of
// Finagle's RetryBudget.
const (
	DefaultBudgetRatio        = 0.2
	DefaultBudgetMinPerSecond = 10.0
	DefaultBudgetWindow       = 10 * time.Second
)

// NoMinimum, as [BudgetConfig.MinPerSecond], grants no retries beyond
// those the calls pay for.
const NoMinimum = -1.0

// BudgetConfig configures a [Budget]. The zero value is valid: retries of
// at most 20% of the calls of about the last 10 seconds, plus 10 a second.
// [NewBudget] copies it.
type BudgetConfig struct {
	// Ratio is the retries each call pays for. Zero means 0.2; otherwise
	// it must be finite and > 0.
	Ratio float64

	// MinPerSecond is the rate of retries granted whatever the traffic.
	// Zero means 10; otherwise it must be finite and >= 0, or [NoMinimum].
	MinPerSecond float64

	// Window is the time constant with which deposits fade. Zero means
	// 10s; otherwise it must be at least 1ms.
	Window time.Duration
}

// resolve returns cfg with its defaults filled in, MinPerSecond 0 meaning
// none, or an error naming the first invalid field.
func (cfg BudgetConfig) resolve() (BudgetConfig, error) {
	s := cfg
	if s.Ratio == 0 {
		s.Ratio = DefaultBudgetRatio
	}
	if !(s.Ratio > 0) || math.IsInf(s.Ratio, 0) { // NaN fails too
		return s, fmt.Errorf("retry: BudgetConfig.Ratio must be a finite number > 0, got %v", cfg.Ratio)
	}
	switch {
	case s.MinPerSecond == 0:
		s.MinPerSecond = DefaultBudgetMinPerSecond
	case s.MinPerSecond == NoMinimum:
		s.MinPerSecond = 0
	case !(s.MinPerSecond >= 0) || math.IsInf(s.MinPerSecond, 0): // NaN fails too
		return s, fmt.Errorf("retry: BudgetConfig.MinPerSecond must be a finite number >= 0 or NoMinimum, got %v", cfg.MinPerSecond)
	}
	if s.Window == 0 {
		s.Window = DefaultBudgetWindow
	}
	if s.Window < time.Millisecond {
		return s, fmt.Errorf("retry: BudgetConfig.Window must be >= 1ms, got %v", cfg.Window)
	}
	return s, nil
}

// Budget bounds the retries of the calls that share it. Each call deposits
// Ratio of a retry, and each retry withdraws one. At time t the balance is
//
//	Window x MinPerSecond
//	+ Ratio x e^(-(t-ti)/Window)  for each deposit, made at ti
//	- e^(-(t-tj)/Window)          for each retry granted, at tj
//
// A retry is granted only when the balance holds a whole one, so the
// balance is never negative. It never exceeds 2^53.
//
// A deposit counts as made at the last update of the balance before it.
// Reads update the balance, and so does the first deposit of each tick. A
// tick is Window/64, at least 1ms and at most 1s. So a deposit counts as
// made at most one tick early, and the balance is never more than the
// formula gives.
//
// The zero Budget is not usable: build one with [NewBudget]. A Budget is
// safe for concurrent use. With testing/synctest, build it in the bubble
// that uses it.
type Budget struct {
	// base counts deposits until two collide, and the stripes after. Each
	// is on cache lines of its own.
	base    budgetStripe
	striped atomic.Bool
	idle    atomic.Bool // the next deposit updates the balance
	stripes []budgetStripe
	mask    uint32 // len(stripes) - 1

	s       BudgetConfig // resolved
	start   time.Time
	reserve float64 // Window x MinPerSecond, in retries
	tick    time.Duration
	timer   *time.Timer // marks idle a tick after the first deposit of a tick

	mu      sync.Mutex
	balance float64 // as of at
	seen    int64   // deposits already in balance
	at      time.Duration
}

// budgetStripe is a counter of deposits, alone on two cache lines.
type budgetStripe struct {
	n atomic.Int64
	_ [120]byte
}

// stripeToken is a processor's stripe. sync.Pool keeps one per processor,
// so each keeps depositing on the same stripe.
type stripeToken struct{ idx uint32 }

var stripeTokens = sync.Pool{New: func() any { return &stripeToken{idx: rand.Uint32()} }}

// budgetMaxBalance caps the balance, so that absurd settings cannot make
// it infinite, and then NaN.
const budgetMaxBalance = 1 << 53

// NewBudget returns a Budget configured by cfg, or an error naming the
// first invalid field of cfg. Its balance starts at Window x MinPerSecond.
func NewBudget(cfg BudgetConfig) (*Budget, error) {
	s, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	// Four stripes per processor, a power of two, at most 64.
	n := 1 << bits.Len(uint(min(4*runtime.GOMAXPROCS(0), 64)-1))
	b := &Budget{
		stripes: make([]budgetStripe, n),
		mask:    uint32(n - 1),
		s:       s,
		start:   time.Now(),
		reserve: min(s.Window.Seconds()*s.MinPerSecond, budgetMaxBalance),
		tick:    min(max(s.Window/64, time.Millisecond), time.Second),
	}
	b.balance = b.reserve
	b.idle.Store(true)
	b.timer = time.AfterFunc(b.tick, func() { b.idle.Store(true) })
	b.timer.Stop()
	return b, nil
}

// Deposit records one call. A [Retry] or a hedge.Hedge with this Budget calls
// it as each call starts. Call it for calls made outside them that should
// pay for retries.
func (b *Budget) Deposit() {
	if b.idle.Load() {
		b.mu.Lock()
		if b.idle.Load() {
			b.update()
			b.idle.Store(false)
			b.timer.Reset(b.tick)
		}
		b.mu.Unlock()
	}
	if !b.striped.Load() {
		if v := b.base.n.Load(); b.base.n.CompareAndSwap(v, v+1) {
			return
		}
		b.striped.Store(true) // processors contend for base
	}
	t := stripeTokens.Get().(*stripeToken)
	b.stripes[t.idx&b.mask].n.Add(1)
	stripeTokens.Put(t)
}

// calls returns the deposits made so far.
func (b *Budget) calls() int64 {
	n := b.base.n.Load()
	for i := range b.stripes {
		n += b.stripes[i].n.Load()
	}
	return n
}

// TryWithdraw takes one retry from the balance and returns true, or
// returns false if the balance holds less than one. A [Retry] or a hedge.Hedge
// with this Budget calls it before each retry or hedge. Call it before a
// retry made outside them, and do not retry if it returns false.
func (b *Budget) TryWithdraw() bool {
	b.mu.Lock()
	b.update()
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
	b.update()
	v := b.balance
	b.mu.Unlock()
	return v
}

// update brings the balance to now: the new deposits join it as made at
// b.at, then its distance from the reserve decays. b.mu must be held.
func (b *Budget) update() {
	now := time.Since(b.start)
	calls := b.calls()
	bal := min(b.balance+float64(calls-b.seen)*b.s.Ratio, budgetMaxBalance)
	b.seen = calls
	if dt := now - b.at; dt > 0 {
		b.at = now
		bal = b.reserve + (bal-b.reserve)*math.Exp(-float64(dt)/float64(b.s.Window))
	}
	b.balance = bal
}

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

// Defaults for the zero values of [BudgetConfig] fields: Finagle's
// RetryBudget defaults.
const (
	DefaultBudgetRatio        = 0.2
	DefaultBudgetMinPerSecond = 10.0
	DefaultBudgetWindow       = 10 * time.Second
)

// NoMinimum, as [BudgetConfig.MinPerSecond], grants no retries beyond those
// the calls have paid for. A MinPerSecond of 0 means
// [DefaultBudgetMinPerSecond].
const NoMinimum = -1.0

// BudgetConfig configures a [Budget]. The zero value is valid: retries may
// be at most 20% of the calls of about the last 10 seconds, plus 10
// retries per second. [NewBudget] copies it.
type BudgetConfig struct {
	// Ratio is the number of retries each call pays for: with a Ratio of
	// 0.2, retries may add at most 20% to the attempts a dependency
	// receives, however many attempts a call may make. Zero means 0.2;
	// otherwise it must be a finite number > 0 (values above 1 are allowed,
	// for calls that are expected to retry more than once).
	Ratio float64

	// MinPerSecond is the rate of retries granted whatever the traffic, so
	// that a client with few calls can still retry: Window x MinPerSecond
	// retries are kept in reserve, refilled at MinPerSecond a second. Zero
	// means 10; otherwise it must be a finite number >= 0, or [NoMinimum]
	// for none.
	MinPerSecond float64

	// Window is how long a call's deposit lasts: deposits fade
	// exponentially with Window as their time constant, so the balance
	// remembers about the last Window of traffic. Zero means 10s; otherwise
	// it must be at least 1ms.
	Window time.Duration
}

// budgetSettings are a BudgetConfig with defaults filled in and validated.
type budgetSettings struct {
	ratio  float64
	floor  float64 // retries per second
	window time.Duration
}

// resolve fills in the defaults of cfg and validates it; the error names
// the first invalid field.
func (cfg BudgetConfig) resolve() (budgetSettings, error) {
	s := budgetSettings{ratio: cfg.Ratio, floor: cfg.MinPerSecond, window: cfg.Window}
	if s.ratio == 0 {
		s.ratio = DefaultBudgetRatio
	}
	if !(s.ratio > 0) || math.IsInf(s.ratio, 0) { // NaN fails too
		return s, fmt.Errorf("retry: BudgetConfig.Ratio must be a finite number > 0, got %v", cfg.Ratio)
	}
	switch {
	case s.floor == 0:
		s.floor = DefaultBudgetMinPerSecond
	case s.floor == NoMinimum:
		s.floor = 0
	case !(s.floor >= 0) || math.IsInf(s.floor, 0): // NaN fails too
		return s, fmt.Errorf("retry: BudgetConfig.MinPerSecond must be a finite number >= 0 or NoMinimum, got %v", cfg.MinPerSecond)
	}
	if s.window == 0 {
		s.window = DefaultBudgetWindow
	}
	if s.window < time.Millisecond {
		return s, fmt.Errorf("retry: BudgetConfig.Window must be >= 1ms, got %v", cfg.Window)
	}
	return s, nil
}

// Budget bounds the retries of the calls that share it, so that retries
// cannot multiply the load on a failing dependency. Each call deposits
// [BudgetConfig.Ratio] of a retry, each retry withdraws one, and a retry
// the balance cannot pay for is refused. Share one Budget, through
// [Config.Budget], between the [Retry] policies and pipelines that call the
// same dependency. A Retry whose budget refuses a retry ends the call with
// an [*ExhaustedError] with Reason [ReasonBudget].
//
// At time t the balance is
//
//	Window x MinPerSecond
//	+ Ratio x e^(-(t-ti)/Window)  for each deposit, made at ti
//	- e^(-(t-tj)/Window)          for each retry granted, at tj
//
// So deposits fade with time constant Window. A new Budget starts with the
// reserve of Window x MinPerSecond retries, which refills at up to
// MinPerSecond retries a second. Under steady traffic of λ calls per second
// and no retries, the balance settles at about
// (Ratio x λ + MinPerSecond) x Window. When everything fails, retries
// settle at about Ratio x λ + MinPerSecond a second: attempts per call at
// about 1 + Ratio + MinPerSecond/λ, whatever MaxAttempts is. A retry is
// granted only when the balance holds a whole one, so the balance never
// goes negative. It never exceeds 2^53 retries.
//
// A deposit counts as made at the last update of the balance before it.
// The balance is updated when it is read ([Budget.TryWithdraw],
// [Budget.Available]) and by the first deposit of each tick. A tick is
// Window/64, at least 1ms and at most 1s. So each deposit counts as made at
// most one tick early. The balance is never more than the formula gives (up
// to rounding). It is never less than the formula gives with each deposit
// worth Ratio x e^(-tick/Window), 0.98 x Ratio for windows of 64ms to 64s.
// A process too busy to run its timers on time grants fewer retries, never
// more.
//
// [Budget.Deposit] makes one atomic update and reads no clock, except at
// the first deposit of a tick. A retry's [Budget.TryWithdraw] holds a
// mutex for a few arithmetic operations, never while fn runs.
//
// The zero Budget is not usable: build one with [NewBudget]. A Budget is
// safe for concurrent use by multiple goroutines. In a test with
// testing/synctest, build a Budget in the bubble that uses it: its clock
// and timer are the bubble's.
type Budget struct {
	// base counts deposits until two collide; the stripes count them
	// after. They are the only words the success path writes, each on
	// cache lines of its own, so that deposits on different processors,
	// and the mutex and balance written on the retry path, do not share
	// one. base + the stripes' sum is the calls made.
	base budgetStripe
	// striped is set, once and for good, by the first deposit that
	// collided with another on base. idle is set when the timer marks a
	// tick, and cleared by the next deposit. They share a line with the
	// fields below, which the success path only reads.
	striped atomic.Bool
	idle    atomic.Bool
	stripes []budgetStripe
	mask    uint32 // len(stripes) - 1: a power of two

	s       budgetSettings
	start   time.Time // monotonic origin of at
	reserve float64   // window x floor, in retries
	tick    time.Duration
	timer   *time.Timer // runs onTick a tick after the first deposit of a tick

	mu      sync.Mutex
	balance float64 // retries that may be withdrawn, as of at; never < 0
	seen    int64   // calls already in balance
	at      time.Duration
}

// budgetStripe is one counter of deposits, alone on two cache lines (the
// adjacent-line prefetcher of x86 fetches lines in pairs).
type budgetStripe struct {
	n atomic.Int64
	_ [120]byte
}

// stripeToken is a processor's pick of stripe, kept in stripeTokens
// between deposits. sync.Pool keeps a value per processor (P), and a
// deposit puts its token back on the P it took it from, so each P keeps
// depositing on the same stripe, whichever goroutine runs on it; two Ps
// share a stripe only if their random picks collide (1 in 4 x GOMAXPROCS),
// and then only until the garbage collector empties the pool and new
// tokens pick again. This is how xsync's Counter spreads its stripes,
// without the runtime internals it reaches for. (A stripe picked at random
// on each deposit, or indexed by a goroutine's stack address, which a
// server's short-lived goroutines change at every request, would move each
// line from core to core.)
type stripeToken struct{ idx uint32 }

var stripeTokens = sync.Pool{New: func() any { return &stripeToken{idx: rand.Uint32()} }}

// budgetStripes returns the number of stripes of a new Budget: four per
// processor, so that the processors' random picks seldom collide, rounded
// up to a power of two and capped at 64 (8 KiB).
func budgetStripes() int {
	n := 4 * runtime.GOMAXPROCS(0)
	if n > 64 {
		n = 64
	}
	return 1 << bits.Len(uint(n-1))
}

// NewBudget returns a Budget configured by cfg, or an error naming the
// first invalid field of cfg. Its balance starts at the reserve
// (Window x MinPerSecond retries). It never panics.
func NewBudget(cfg BudgetConfig) (*Budget, error) {
	s, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	n := budgetStripes()
	b := &Budget{
		stripes: make([]budgetStripe, n),
		mask:    uint32(n - 1),
		s:       s,
		start:   time.Now(),
		reserve: min(s.window.Seconds()*s.floor, budgetMaxBalance),
		tick:    min(max(s.window/budgetTicks, time.Millisecond), time.Second),
	}
	b.balance = b.reserve
	b.idle.Store(true)
	b.timer = time.AfterFunc(b.tick, b.onTick)
	b.timer.Stop()
	return b, nil
}

// budgetTicks is the ticks a Budget's timer marks per Window, while calls
// deposit.
const budgetTicks = 64

// Deposit records one call, which pays for Ratio of a retry. A [Retry]
// with this Budget calls it as each call's first attempt starts. Call it
// yourself for calls made outside a Retry that should pay for retries,
// such as an SDK's own retry loop. It makes one atomic update. It reads no
// clock and takes no lock, except as the first deposit of a tick, which
// brings the balance up to date.
func (b *Budget) Deposit() {
	if b.idle.Load() {
		b.wake()
	}
	if !b.striped.Load() {
		if v := b.base.n.Load(); b.base.n.CompareAndSwap(v, v+1) {
			return
		}
		// Another deposit came in between: cores contend for base.
		b.striped.Store(true)
	}
	t := stripeTokens.Get().(*stripeToken)
	b.stripes[t.idx&b.mask].n.Add(1)
	stripeTokens.Put(t)
}

// calls returns the deposits made so far: base and the stripes, summed.
// Each only grows, so the sum never falls below an earlier one; a deposit
// made while it is summed counts now or at the next sum.
func (b *Budget) calls() int64 {
	n := b.base.n.Load()
	for i := range b.stripes {
		n += b.stripes[i].n.Load()
	}
	return n
}

// wake brings the balance up to date and arms the timer to mark the next
// tick, for the first deposit of a tick.
func (b *Budget) wake() {
	b.mu.Lock()
	if b.idle.Load() {
		b.update()
		b.idle.Store(false)
		b.timer.Reset(b.tick)
	}
	b.mu.Unlock()
}

// onTick is the timer's function: a tick after the last wake, it makes the
// next deposit wake.
func (b *Budget) onTick() { b.idle.Store(true) }

// TryWithdraw takes one retry from the balance and returns true, or
// returns false, leaving the balance unchanged, if less than one retry is
// available. A [Retry] with this Budget calls it before each retry (each
// attempt after the first); call it yourself before a retry made outside a
// Retry, and do not retry if it returns false.
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

// Available returns the retries the balance holds now: how many
// TryWithdraw calls would succeed in a row if no call deposited meanwhile.
// It is never negative.
func (b *Budget) Available() float64 {
	b.mu.Lock()
	b.update()
	v := b.balance
	b.mu.Unlock()
	return v
}

// budgetMaxBalance caps the balance (and the reserve), far above any real
// count of retries, so that absurd but valid settings (a Ratio of 1e300)
// cannot make it infinite, and then NaN once it decays.
const budgetMaxBalance = 1 << 53

// update brings the balance to now. The calls deposited since the last
// update join it as made at that update (b.at), at most a tick before
// them (see wake); then the balance's distance from the reserve decays by
// exp(-dt/window), which fades the deposits and the withdrawals and
// refills the reserve. b.mu must be held: the clock is read under it, so
// that b.at never goes back.
func (b *Budget) update() {
	now := time.Since(b.start)
	calls := b.calls()
	bal := min(b.balance+float64(calls-b.seen)*b.s.ratio, budgetMaxBalance)
	b.seen = calls
	if dt := now - b.at; dt > 0 {
		b.at = now
		bal = b.reserve + (bal-b.reserve)*math.Exp(-float64(dt)/float64(b.s.window))
	}
	b.balance = bal
}

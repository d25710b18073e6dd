package retry

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Defaults used for the zero values of [HedgeConfig] fields.
const (
	DefaultMaxHedges     = 1
	DefaultHedgeQuantile = 0.9
	DefaultHedgeMinDelay = time.Millisecond
	DefaultHedgeWindow   = 1000
)

// MaxHedgesLimit is the largest [HedgeConfig.MaxHedges]: each hedge is a
// goroutine and a slot in the call's result channel.
const MaxHedgesLimit = 100

// hedgeMinSamples is how many latencies a learned delay needs before it is
// used: until then a Hedge with no fixed Delay starts hedges only after
// failures.
const hedgeMinSamples = 20

// HedgeConfig configures a [Hedge]. The zero value is valid: one hedge,
// started at once when the first attempt fails, or when it has run longer
// than the 90th percentile of the last 1000 latencies (at least 1ms). No
// hedge starts on delay until 20 latencies are known. [NewHedge] copies
// it.
type HedgeConfig struct {
	// Name names the policy in errors and telemetry (watertight.policy.name).
	// Empty is allowed.
	Name string

	// MaxHedges is the number of attempts that may be started beside the
	// first, so a call makes at most 1 + MaxHedges attempts. Zero means 1;
	// otherwise it must be in [1, MaxHedgesLimit].
	MaxHedges int

	// Delay, with Quantile zero, is the fixed delay: after Delay with no
	// answer, the next hedge starts (and so on, Delay apart, up to
	// MaxHedges). With a Quantile, it is the delay used until enough
	// latencies are known (zero: no hedge on delay until then). It must be
	// >= 0.
	Delay time.Duration

	// Quantile, if set, learns the delay: that quantile of the latencies of
	// the last Window attempts, at least MinDelay. Zero means 0.9 when
	// Delay is zero too, and a fixed Delay otherwise; else it must be in
	// (0, 1). The latencies are those of attempts that succeeded, and of
	// losers canceled after running longer than the delay. Failures are
	// not latencies, so a dependency that fails fast does not make hedges
	// start sooner.
	Quantile float64

	// MinDelay is the floor of a learned delay. Zero means 1ms; otherwise
	// it must be > 0. It is ignored with a fixed Delay.
	MinDelay time.Duration

	// Window is the number of recent latencies a learned delay is computed
	// from, using 16 bytes each. Zero means 1000; otherwise it must be in
	// [20, 100000].
	Window int

	// Budget, if set, is drawn on by every hedge as by a retry, and each
	// call deposits into it. A hedge the budget refuses is not started, and
	// neither is any further hedge of that call. Nil means no budget.
	Budget *Budget

	// ShouldRetry, if set, is asked about each failed attempt that the
	// fixed rules (the caller's context done, rejection, permanent error)
	// have not settled: true starts the next hedge at once (if MaxHedges
	// and the budget allow), as gRPC does for a non-fatal status; false
	// ends the call with that error, canceling the other attempts. Nil
	// treats every such error as true. It may be called concurrently.
	ShouldRetry func(error) bool

	// MeterProvider provides the watertight.hedges and
	// watertight.retry.exhausted counters. Nil means the global provider.
	MeterProvider metric.MeterProvider

	// OnHedge, if set, is called as each hedge starts, with its attempt
	// number (2 or more) and whether a failure started it (rather than the
	// delay). It runs on the caller's goroutine, holding no lock, and may
	// be called concurrently by different calls.
	OnHedge func(ctx context.Context, attempt int, afterFailure bool)
}

// hedgeSettings are a HedgeConfig with defaults filled in and validated.
type hedgeSettings struct {
	name        string
	maxHedges   int
	delay       time.Duration
	quantile    float64 // 0: fixed delay
	minDelay    time.Duration
	window      int
	budget      *Budget
	shouldRetry func(error) bool
	onHedge     func(ctx context.Context, attempt int, afterFailure bool)
}

// resolve fills in the defaults of cfg and validates it; the error names
// the first invalid field.
func (cfg HedgeConfig) resolve() (hedgeSettings, error) {
	s := hedgeSettings{
		name:        cfg.Name,
		maxHedges:   cfg.MaxHedges,
		delay:       cfg.Delay,
		quantile:    cfg.Quantile,
		minDelay:    cfg.MinDelay,
		window:      cfg.Window,
		budget:      cfg.Budget,
		shouldRetry: cfg.ShouldRetry,
		onHedge:     cfg.OnHedge,
	}
	if s.maxHedges == 0 {
		s.maxHedges = DefaultMaxHedges
	}
	if s.maxHedges < 1 || s.maxHedges > MaxHedgesLimit {
		return s, fmt.Errorf("retry: HedgeConfig.MaxHedges must be in [1, %d], got %d", MaxHedgesLimit, cfg.MaxHedges)
	}
	if s.delay < 0 {
		return s, fmt.Errorf("retry: HedgeConfig.Delay must be >= 0, got %v", cfg.Delay)
	}
	if s.quantile == 0 && s.delay == 0 {
		s.quantile = DefaultHedgeQuantile
	}
	if s.quantile != 0 && !(s.quantile > 0 && s.quantile < 1) { // NaN fails too
		return s, fmt.Errorf("retry: HedgeConfig.Quantile must be in (0, 1), got %v", cfg.Quantile)
	}
	if s.minDelay == 0 {
		s.minDelay = DefaultHedgeMinDelay
	}
	if s.minDelay < 0 {
		return s, fmt.Errorf("retry: HedgeConfig.MinDelay must be > 0, got %v", cfg.MinDelay)
	}
	if s.window == 0 {
		s.window = DefaultHedgeWindow
	}
	if s.window < hedgeMinSamples || s.window > 100000 {
		return s, fmt.Errorf("retry: HedgeConfig.Window must be in [%d, 100000], got %d", hedgeMinSamples, cfg.Window)
	}
	return s, nil
}

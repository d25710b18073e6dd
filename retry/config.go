package retry

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Defaults for the zero values of [Config] fields.
const (
	DefaultMaxAttempts     = 3
	DefaultInitialInterval = 100 * time.Millisecond
	DefaultMaxInterval     = 10 * time.Second
	DefaultMultiplier      = 2.0
	DefaultJitter          = 0.5
)

// NoJitter, as [Config.Jitter], turns randomisation of the waits off. A
// Jitter of 0 means [DefaultJitter].
const NoJitter = -1.0

// Config configures a [Retry]. The zero value is valid: 3 attempts,
// exponential waits of 100ms, 200ms (each randomised by +-50%), at most
// 10s, and every error retried except rejections, permanent errors and the
// end of the caller's context. [New] copies it.
type Config struct {
	// Name names the policy in errors and telemetry (watertight.policy.name).
	// Empty is allowed.
	Name string

	// MaxAttempts is the number of tries in all, the first included. Zero
	// means 3; otherwise it must be >= 1 (1 never retries). Any value up to
	// math.MaxInt is fine: nothing is sized by it.
	MaxAttempts int

	// InitialInterval is the wait after the first failure. Zero means 100ms;
	// otherwise it must be > 0.
	InitialInterval time.Duration

	// MaxInterval caps every scheduled wait, after randomisation; an error
	// whose RetryAfter asks for longer ends the call as exhausted instead.
	// Zero means 10s; otherwise it must be > 0. After defaults it must be
	// >= InitialInterval.
	MaxInterval time.Duration

	// Multiplier grows the wait after each failure. Zero means 2; otherwise
	// it must be a finite number >= 1.
	Multiplier float64

	// Jitter is the fraction of each wait that is randomised: a wait w
	// becomes a uniform value in [w*(1-Jitter), w*(1+Jitter)], then capped at
	// MaxInterval. Zero means 0.5; otherwise it must be in [0, 1], or
	// [NoJitter] for exact waits.
	Jitter float64

	// ShouldRetry, if set, is asked about each failure that the fixed rules
	// (context done, rejection, permanent error) have not already settled;
	// returning false ends the call with that error. Nil retries every such
	// error, attempt timeouts (context.DeadlineExceeded from a per-attempt
	// deadline, while the caller's ctx is still live) included. It may be
	// called concurrently.
	ShouldRetry func(error) bool

	// NewSchedule, if set, replaces the exponential schedule (and with it
	// InitialInterval, Multiplier and Jitter): it is called once per call,
	// after the first failure that needs a scheduled wait, and the
	// [Schedule] it returns is used by that call alone, so it need not be
	// safe for concurrent use and must not be shared. Its waits are still
	// capped at MaxInterval, and its stop ends the call as exhausted. It
	// must not return nil (the call panics if it does). NewSchedule itself
	// may be called concurrently, by different calls.
	NewSchedule func() Schedule

	// Budget, if set, bounds the retries of the calls of every Retry that
	// shares it (see [Budget]): each call deposits into it, and a retry it
	// refuses ends the call with an [*ExhaustedError] whose Reason is
	// [ReasonBudget]. Nil means no budget: every retry the other rules
	// allow is made.
	Budget *Budget

	// MeterProvider provides the watertight.retry.attempts and
	// watertight.retry.exhausted counters. Nil means the global provider.
	MeterProvider metric.MeterProvider

	// OnRetry, if set, is called before each wait: attempt number attempt
	// failed with err and the next try starts after wait. It runs on the
	// caller's goroutine, holding no lock, and may be called concurrently by
	// different calls.
	OnRetry func(ctx context.Context, attempt int, err error, wait time.Duration)
}

// settings are a Config with defaults filled in and validated.
type settings struct {
	name        string
	maxAttempts int
	initial     time.Duration
	max         time.Duration
	multiplier  float64
	jitter      float64
	shouldRetry func(error) bool
	newSchedule func() Schedule
	onRetry     func(ctx context.Context, attempt int, err error, wait time.Duration)
	budget      *Budget
}

// resolve fills in the defaults of cfg and validates it; the error names the
// first invalid field.
func (cfg Config) resolve() (settings, error) {
	s := settings{
		name:        cfg.Name,
		maxAttempts: cfg.MaxAttempts,
		initial:     cfg.InitialInterval,
		max:         cfg.MaxInterval,
		multiplier:  cfg.Multiplier,
		jitter:      cfg.Jitter,
		shouldRetry: cfg.ShouldRetry,
		newSchedule: cfg.NewSchedule,
		onRetry:     cfg.OnRetry,
		budget:      cfg.Budget,
	}
	if s.maxAttempts == 0 {
		s.maxAttempts = DefaultMaxAttempts
	}
	if s.maxAttempts < 1 {
		return s, fmt.Errorf("retry: Config.MaxAttempts must be >= 1, got %d", cfg.MaxAttempts)
	}
	if s.initial == 0 {
		s.initial = DefaultInitialInterval
	}
	if s.initial < 0 {
		return s, fmt.Errorf("retry: Config.InitialInterval must be > 0, got %v", cfg.InitialInterval)
	}
	if s.max == 0 {
		s.max = DefaultMaxInterval
	}
	if s.max < 0 {
		return s, fmt.Errorf("retry: Config.MaxInterval must be > 0, got %v", cfg.MaxInterval)
	}
	if s.max < s.initial {
		return s, fmt.Errorf("retry: Config.MaxInterval (%v) must be >= Config.InitialInterval (%v)", s.max, s.initial)
	}
	if s.multiplier == 0 {
		s.multiplier = DefaultMultiplier
	}
	// Written so that NaN fails too.
	if !(s.multiplier >= 1) || math.IsInf(s.multiplier, 0) {
		return s, fmt.Errorf("retry: Config.Multiplier must be a finite number >= 1, got %v", cfg.Multiplier)
	}
	switch {
	case s.jitter == 0:
		s.jitter = DefaultJitter
	case s.jitter == NoJitter:
		s.jitter = 0
	case !(s.jitter >= 0 && s.jitter <= 1): // NaN fails too
		return s, fmt.Errorf("retry: Config.Jitter must be in [0, 1] or NoJitter, got %v", cfg.Jitter)
	}
	return s, nil
}

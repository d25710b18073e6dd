package adaptive

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/slots"
	"github.com/watertight/watertight/policy"
)

// Unbounded, as Config.MaxQueue, lets any number of callers wait.
const Unbounded = -1

// Defaults of the Config fields whose zero value means "the default".
const (
	DefaultMinLimit      = 1
	DefaultMaxLimit      = 200
	DefaultInitialLimit  = 20
	DefaultTolerance     = 1.25
	DefaultProbeInterval = 30 * time.Second
)

// Config configures a [Limiter]. Its zero value is valid: a limit that
// starts at 20 and moves between 1 and 200, no waiting, a tolerance of
// 1.25 and a probe every 30 s. [New] copies it.
type Config struct {
	// Name names the limiter in errors and telemetry (the
	// watertight.policy.name attribute). Empty is allowed.
	Name string

	// MinLimit and MaxLimit bound the limit. 0 means the default (1 and
	// 200). Otherwise MinLimit must be >= 1 and MaxLimit >= MinLimit.
	MinLimit, MaxLimit int

	// InitialLimit is the limit the first adjustment starts from. 0 means
	// 20, clamped to [MinLimit, MaxLimit]. Otherwise it must lie in
	// [MinLimit, MaxLimit].
	InitialLimit int

	// MaxQueue is the number of calls that may wait when the limit is
	// reached. 0 means none: such a call is rejected at once. [Unbounded]
	// lets any number wait. Other negative values are invalid.
	MaxQueue int

	// MaxWait is how long a call may wait before it is rejected with reason
	// "wait_timeout". 0 means until its context is done. Negative values
	// are invalid.
	MaxWait time.Duration

	// Tolerance is how far the latency at the limit may rise above the
	// no-load latency before the limit shrinks. The limit settles where the
	// latency is about Tolerance times the no-load latency. 0 means 1.25;
	// otherwise it must be finite and >= 1.
	Tolerance float64

	// ProbeInterval is how long after one probe the next is due. It runs at
	// the next window whose calls reach the limit. 0 means 30 s; negative
	// values are invalid. Probes are at least 20 windows apart.
	ProbeInterval time.Duration

	// MeterProvider provides the meter for the rejection counter, the
	// active and queued up-down counters and the limit gauge. If nil, the
	// global MeterProvider is used.
	MeterProvider metric.MeterProvider

	// OnReject, if not nil, is called once for every rejection, holding no
	// lock, on the rejected caller's goroutine, with its ctx and the error
	// Execute returns. It must not modify the error.
	OnReject func(ctx context.Context, err *policy.RejectedError)
}

// settings are a Config with its defaults applied and checked.
type settings struct {
	min, max, initial int
	queueCap          int // Unbounded as slots.Unbounded
	maxWait           time.Duration
	tolerance         float64
	probeInterval     time.Duration
}

// resolve applies the defaults of c and reports the first invalid field.
func (c *Config) resolve() (settings, error) {
	s := settings{min: c.MinLimit, max: c.MaxLimit, initial: c.InitialLimit,
		maxWait: c.MaxWait, tolerance: c.Tolerance, probeInterval: c.ProbeInterval}
	if s.min == 0 {
		s.min = DefaultMinLimit
	}
	if s.min < 1 {
		return s, fmt.Errorf("adaptive: Config.MinLimit must be >= 1 (0 means %d), got %d", DefaultMinLimit, c.MinLimit)
	}
	if s.max == 0 {
		s.max = DefaultMaxLimit
		if s.max < s.min {
			return s, fmt.Errorf("adaptive: Config.MaxLimit must be >= MinLimit (%d), got 0 (which means %d)", s.min, DefaultMaxLimit)
		}
	}
	if s.max < s.min {
		return s, fmt.Errorf("adaptive: Config.MaxLimit must be >= MinLimit (%d), got %d", s.min, c.MaxLimit)
	}
	if s.initial == 0 {
		s.initial = min(max(DefaultInitialLimit, s.min), s.max)
	}
	if s.initial < s.min || s.initial > s.max {
		return s, fmt.Errorf("adaptive: Config.InitialLimit must be in [MinLimit, MaxLimit] ([%d, %d]), got %d", s.min, s.max, c.InitialLimit)
	}
	switch {
	case c.MaxQueue == Unbounded:
		s.queueCap = slots.Unbounded
	case c.MaxQueue < 0:
		return s, fmt.Errorf("adaptive: Config.MaxQueue must be >= 0 or Unbounded (-1), got %d", c.MaxQueue)
	default:
		s.queueCap = c.MaxQueue
	}
	if c.MaxWait < 0 {
		return s, fmt.Errorf("adaptive: Config.MaxWait must be >= 0, got %v", c.MaxWait)
	}
	if s.tolerance == 0 {
		s.tolerance = DefaultTolerance
	}
	if math.IsNaN(s.tolerance) || math.IsInf(s.tolerance, 0) || s.tolerance < 1 {
		return s, fmt.Errorf("adaptive: Config.Tolerance must be finite and >= 1 (0 means %v), got %v", DefaultTolerance, c.Tolerance)
	}
	if s.probeInterval == 0 {
		s.probeInterval = DefaultProbeInterval
	}
	if s.probeInterval < 0 {
		return s, fmt.Errorf("adaptive: Config.ProbeInterval must be >= 0 (0 means %v), got %v", DefaultProbeInterval, c.ProbeInterval)
	}
	return s, nil
}

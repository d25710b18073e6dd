package retry

import (
	"cmp"
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/fielderr"
	"github.com/watertight/watertight/internal/jsonconf"
)

// The values of zero [Config] fields.
const (
	defaultMaxAttempts     = 3
	defaultInitialInterval = 100 * time.Millisecond
	defaultMaxInterval     = 10 * time.Second
	defaultJitter          = 0.5
)

// multiplier grows the wait after each failure, as Polly's exponential
// backoff does; Config.NewSchedule gives any other schedule.
const multiplier = 2.0

// Config configures a [Retry]. The zero value is valid: each field says
// its default. [New] copies it.
//
// Config reads and writes JSON: {"max_attempts": 3,
// "initial_interval": "200ms", "max_interval": "5s", "jitter": 0.2}. The
// keys are the json tags and durations are Go duration strings; zero
// fields are left out. ShouldRetry, NewSchedule, Budget, MeterProvider
// and OnRetry are not data: they are neither written nor read.
type Config struct {
	// Name names the policy in errors and telemetry. Empty is allowed.
	Name string `json:"name"`

	// MaxAttempts is the number of tries, the first included. Zero means
	// 3; otherwise it must be >= 1.
	MaxAttempts int `json:"max_attempts"`

	// InitialInterval is the wait after the first failure; each later
	// wait doubles. Zero means 100ms; otherwise it must be > 0.
	InitialInterval time.Duration `json:"initial_interval"`

	// MaxInterval caps every scheduled wait. An error whose RetryAfter
	// asks for longer ends the call as exhausted. Zero means 10s;
	// otherwise it must be > 0. It must be >= InitialInterval.
	MaxInterval time.Duration `json:"max_interval"`

	// Jitter randomises each wait w to a uniform value in
	// [w*(1-Jitter), w*(1+Jitter)], before the cap. Zero means 0.5, and
	// a negative value means none; otherwise it must be at most 1.
	Jitter float64 `json:"jitter"`

	// ShouldRetry, if set, is asked about each failure the fixed rules
	// have not settled. False ends the call with that error. Nil retries
	// every such error. It may be called concurrently.
	ShouldRetry func(error) bool `json:"-"`

	// NewSchedule, if set, replaces the exponential schedule
	// (InitialInterval and Jitter). It is called once per
	// call, at the first failure that needs a scheduled wait, and the
	// schedule it returns is Reset, then used by that call alone. Each
	// NextBackOff gives the wait before the next attempt, capped at
	// MaxInterval; backoff.Stop ends the call with [ReasonStopped], and
	// any other negative wait means none. An error's RetryAfter takes
	// precedence, and NextBackOff is not called for it. NewSchedule must
	// not return nil: the call panics. It may be called concurrently.
	NewSchedule func() backoff.BackOff `json:"-"`

	// Budget, if set, bounds the retries of every Retry that shares it.
	// Nil means no budget.
	Budget *Budget `json:"-"`

	// MeterProvider provides the counters. Nil means the global provider.
	MeterProvider metric.MeterProvider `json:"-"`

	// OnRetry, if set, is called before each wait: attempt failed with
	// err, and the next starts after wait. It runs on the caller's
	// goroutine and may be called concurrently by different calls.
	OnRetry func(ctx context.Context, attempt int, err error, wait time.Duration) `json:"-"`
}

// MarshalJSON returns cfg's data fields as a JSON object.
func (cfg Config) MarshalJSON() ([]byte, error) { return jsonconf.Marshal(cfg) }

// UnmarshalJSON reads the JSON object data into cfg. It refuses what
// [New] refuses, with an error naming the JSON field: "max_attempts: must
// be >= 1, got 0". A key data leaves out leaves its field as it was; on
// error cfg is unchanged.
func (cfg *Config) UnmarshalJSON(data []byte) error {
	return jsonconf.Read(data, cfg, func(c Config) error {
		_, err := c.resolve()
		return err
	})
}

// resolve returns cfg with its defaults filled in, Jitter 0 meaning none,
// or an error naming the first invalid field.
func (cfg Config) resolve() (Config, error) {
	s := cfg
	s.MaxAttempts = cmp.Or(s.MaxAttempts, defaultMaxAttempts)
	if s.MaxAttempts < 1 {
		return s, fielderr.New("retry", "MaxAttempts", "must be >= 1, got %d", cfg.MaxAttempts)
	}
	s.InitialInterval = cmp.Or(s.InitialInterval, defaultInitialInterval)
	if s.InitialInterval < 0 {
		return s, fielderr.New("retry", "InitialInterval", "must be > 0, got %v", cfg.InitialInterval)
	}
	s.MaxInterval = cmp.Or(s.MaxInterval, defaultMaxInterval)
	if s.MaxInterval < 0 {
		return s, fielderr.New("retry", "MaxInterval", "must be > 0, got %v", cfg.MaxInterval)
	}
	if s.MaxInterval < s.InitialInterval {
		return s, fielderr.New("retry", "MaxInterval", "(%v) must be >= Config.InitialInterval (%v)", s.MaxInterval, s.InitialInterval)
	}
	switch {
	case s.Jitter == 0:
		s.Jitter = defaultJitter
	case s.Jitter < 0:
		s.Jitter = 0
	case !(s.Jitter <= 1): // NaN fails too
		return s, fielderr.New("retry", "Jitter", "must be at most 1, got %v", cfg.Jitter)
	}
	return s, nil
}

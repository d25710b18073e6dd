package ratelimit

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/policy"
)

const (
	DefaultMaxHold = 60 * time.Second // Config.MaxHold's default
	maxSignal      = 24 * time.Hour   // the longest wait a signal may name: a longer one is ignored
)

// Config configures a [Limiter]. The zero value is valid: no client-side
// rate, and holds of at most 60 s. [New] copies it.
type Config struct {
	// Name names the Limiter in errors and telemetry. Empty is allowed.
	Name string

	// RequestsPerSecond, if > 0, admits at most that many attempts per
	// second on average, in bursts of at most Burst. It must be a finite
	// number >= 0.
	RequestsPerSecond float64
	// Burst is the most attempts admitted at once under RequestsPerSecond.
	// 0 means RequestsPerSecond rounded up (at least 1). It must be >= 0.
	Burst int

	// TokensPerMinute, if > 0, admits attempts while the costs they declare
	// with [WithCost] stay within that many tokens per minute, in bursts of
	// at most TokenBurst. It must be a finite number >= 0.
	TokensPerMinute float64
	// TokenBurst is the most tokens drawn at once. 0 means TokensPerMinute
	// rounded up. It must be >= 0. A larger cost draws TokenBurst.
	TokenBurst int

	// MaxHold caps the hold one signal sets. 0 means 60 s; it must be >= 0.
	MaxHold time.Duration

	// MaxWait is the longest an attempt waits for a hold or the client-side
	// rate. An attempt that would wait longer, or past its context's
	// deadline, is rejected at once. A hold met again after the gate counts
	// afresh. 0 means MaxHold; it must be >= 0.
	MaxWait time.Duration

	// MeterProvider provides the instruments. Nil means the global one.
	MeterProvider metric.MeterProvider

	// OnReject, if not nil, is called once for every rejection, on the
	// rejected caller's goroutine with its ctx, holding no lock. It must
	// not modify the error.
	OnReject func(ctx context.Context, err *policy.RejectedError)
}

// validate reports the first invalid field of c.
func (c *Config) validate() error {
	switch {
	case !(c.RequestsPerSecond >= 0) || math.IsInf(c.RequestsPerSecond, 0):
		return fmt.Errorf("ratelimit: Config.RequestsPerSecond must be a finite number >= 0, got %v", c.RequestsPerSecond)
	case c.Burst < 0:
		return fmt.Errorf("ratelimit: Config.Burst must be >= 0, got %d", c.Burst)
	case !(c.TokensPerMinute >= 0) || math.IsInf(c.TokensPerMinute, 0):
		return fmt.Errorf("ratelimit: Config.TokensPerMinute must be a finite number >= 0, got %v", c.TokensPerMinute)
	case c.TokenBurst < 0:
		return fmt.Errorf("ratelimit: Config.TokenBurst must be >= 0, got %d", c.TokenBurst)
	case c.MaxHold < 0:
		return fmt.Errorf("ratelimit: Config.MaxHold must be >= 0, got %v", c.MaxHold)
	case c.MaxWait < 0:
		return fmt.Errorf("ratelimit: Config.MaxWait must be >= 0, got %v", c.MaxWait)
	}
	return nil
}

// burst returns b, or if b is 0 rate rounded up, in [1, math.MaxInt32].
func burst(b int, rate float64) int {
	if b > 0 {
		return b
	}
	return int(max(1, min(math.Ceil(rate), math.MaxInt32)))
}

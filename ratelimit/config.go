package ratelimit

import (
	"context"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/fielderr"
	"github.com/watertight/watertight/internal/jsonconf"
	"github.com/watertight/watertight/internal/nilcheck"
	"github.com/watertight/watertight/policy"
)

const (
	DefaultMaxHold = 60 * time.Second // Config.MaxHold's default
	maxSignal      = 24 * time.Hour   // the longest wait a signal may name: a longer one is ignored
)

// Config configures a [Limiter]. The zero value is valid: no client-side
// rate, and holds of at most 60 s. [New] copies it.
//
// Config reads and writes JSON: {"requests_per_second": 50, "burst": 10,
// "max_hold": "30s"}. The keys are the json tags and durations are Go
// duration strings; zero fields are left out. Shared, MeterProvider and
// OnReject are not data: they are neither written nor read.
type Config struct {
	// Name names the Limiter in errors and telemetry. Empty is allowed.
	Name string `json:"name"`

	// RequestsPerSecond, if > 0, admits at most that many attempts per
	// second on average, in bursts of at most Burst. It must be a finite
	// number >= 0.
	RequestsPerSecond float64 `json:"requests_per_second"`
	// Burst is the most attempts admitted at once under RequestsPerSecond.
	// 0 means RequestsPerSecond rounded up (at least 1). It must be >= 0.
	Burst int `json:"burst"`

	// TokensPerMinute, if > 0, admits attempts while the costs they declare
	// with [WithCost] stay within that many tokens per minute, in bursts of
	// at most TokenBurst. It must be a finite number >= 0.
	TokensPerMinute float64 `json:"tokens_per_minute"`
	// TokenBurst is the most tokens drawn at once. 0 means TokensPerMinute
	// rounded up. It must be >= 0. A larger cost draws TokenBurst.
	TokenBurst int `json:"token_burst"`

	// MaxHold caps the hold one signal sets. 0 means 60 s; it must be >= 0.
	MaxHold time.Duration `json:"max_hold"`

	// MaxWait is the longest an attempt waits for a hold or the client-side
	// rate. An attempt that would wait longer, or past its context's
	// deadline, is rejected at once. A hold met again after the gate counts
	// afresh. 0 means MaxHold; it must be >= 0.
	MaxWait time.Duration `json:"max_wait"`

	// Shared, if not nil, is a quota shared with other processes, such as
	// redisstate.Quota: an attempt this Limiter admits is admitted by
	// Shared too before it runs (see "A shared quota" in the package doc).
	// It is not data, and an Update keeps the one New was given.
	Shared Shared `json:"-"`

	// MeterProvider provides the instruments. Nil means the global one.
	MeterProvider metric.MeterProvider `json:"-"`

	// OnReject, if not nil, is called once for every rejection, on the
	// rejected caller's goroutine with its ctx, holding no lock. It must
	// not modify the error.
	OnReject func(ctx context.Context, err *policy.RejectedError) `json:"-"`
}

// MarshalJSON returns c's data fields as a JSON object.
func (c Config) MarshalJSON() ([]byte, error) { return jsonconf.Marshal(c) }

// UnmarshalJSON reads the JSON object data into c. It refuses what [New]
// refuses, with an error naming the JSON field: "burst: must be >= 0, got
// -1". A key data leaves out leaves its field as it was; on error c is
// unchanged.
func (c *Config) UnmarshalJSON(data []byte) error {
	return jsonconf.Read(data, c, Config.validate)
}

// validate reports the first invalid field of c.
func (c Config) validate() error {
	switch {
	case !(c.RequestsPerSecond >= 0) || math.IsInf(c.RequestsPerSecond, 0):
		return fielderr.New("ratelimit", "RequestsPerSecond", "must be a finite number >= 0, got %v", c.RequestsPerSecond)
	case c.Burst < 0:
		return fielderr.New("ratelimit", "Burst", "must be >= 0, got %d", c.Burst)
	case !(c.TokensPerMinute >= 0) || math.IsInf(c.TokensPerMinute, 0):
		return fielderr.New("ratelimit", "TokensPerMinute", "must be a finite number >= 0, got %v", c.TokensPerMinute)
	case c.TokenBurst < 0:
		return fielderr.New("ratelimit", "TokenBurst", "must be >= 0, got %d", c.TokenBurst)
	case c.MaxHold < 0:
		return fielderr.New("ratelimit", "MaxHold", "must be >= 0, got %v", c.MaxHold)
	case c.MaxWait < 0:
		return fielderr.New("ratelimit", "MaxWait", "must be >= 0, got %v", c.MaxWait)
	case nilcheck.Pointer(c.Shared):
		return fielderr.New("ratelimit", "Shared", "is a nil %T; leave it nil for no shared quota", c.Shared)
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

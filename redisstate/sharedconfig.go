package redisstate

import (
	"time"

	"github.com/watertight/watertight/breaker"
)

// Defaults of [BreakerConfig]'s zero fields.
const (
	// DefaultQuorum is BreakerConfig.Quorum's default: one replica's trip
	// opens the breaker everywhere.
	DefaultQuorum = 1
	// DefaultTripWindow is BreakerConfig.Window's default.
	DefaultTripWindow = 60 * time.Second
	// DefaultPollInterval is BreakerConfig.PollInterval's default.
	DefaultPollInterval = 200 * time.Millisecond
	// DefaultProbeLease is BreakerConfig.ProbeLease's default.
	DefaultProbeLease = 10 * time.Second
)

// BreakerConfig configures a [SharedBreaker]. Its zero value is not valid:
// Breaker.Name and Redis.Client must be set. It is read once, by
// [NewSharedBreaker].
type BreakerConfig struct {
	// Breaker configures the local breaker every call goes through: its
	// trip rules, OpenTimeout (also the length of a shared open period
	// this replica starts, and the longest it holds one it is told of),
	// HalfOpenRequests, IsFailure, telemetry and hooks. Breaker.Name must
	// not be empty: it also names the shared state in Redis, so every
	// replica of one breaker must use the same Name. Breaker.OnStateChange
	// is called as usual, before the change is reported to Redis (by
	// another goroutine).
	Breaker breaker.Config

	// Redis says how to reach Redis. Redis.Client is required.
	Redis Redis

	// Quorum is the number of distinct replicas whose breakers must trip
	// within Window for the breaker to open everywhere. 0 means
	// [DefaultQuorum] (1); negative is invalid. Below the quorum, a
	// replica's trip opens its own breaker only.
	Quorum int

	// Window is how long a replica's trip counts towards the quorum. 0
	// means [DefaultTripWindow] (60 s); it must be 0 or at least 1 ms.
	Window time.Duration

	// PollInterval is how often each replica reads the shared state, which
	// finds an open or a close whose message it missed and a half-open
	// period whose probe lease is free. 0 means [DefaultPollInterval]
	// (200 ms); it must be 0 or at least 1 ms.
	PollInterval time.Duration

	// ProbeLease is how long the probe lease lasts unless renewed (its
	// holder renews it at each poll): if the prober dies, another replica
	// probes after at most ProbeLease. 0 means [DefaultProbeLease] (10 s);
	// it must be 0 or at least 10 ms.
	ProbeLease time.Duration

	// NoSubscribe turns the subscription off: the replicas learn the
	// shared state by polling alone, every PollInterval. For Redis proxies
	// without pub/sub.
	NoSubscribe bool

	// Replica identifies this replica in Redis. Empty means a random one.
	Replica string
}

// validate reports the first invalid field of c.
func (c *BreakerConfig) validate() error {
	if c.Breaker.Name == "" {
		return errorf("Config.Breaker.Name must not be empty: it names the breaker's shared state in Redis")
	}
	if c.Quorum < 0 {
		return errorf("Config.Quorum must be >= 0, got %d", c.Quorum)
	}
	if c.Window != 0 && c.Window < time.Millisecond {
		return errorf("Config.Window must be 0 or >= 1ms, got %v", c.Window)
	}
	if c.PollInterval != 0 && c.PollInterval < time.Millisecond {
		return errorf("Config.PollInterval must be 0 or >= 1ms, got %v", c.PollInterval)
	}
	if c.ProbeLease != 0 && c.ProbeLease < 10*time.Millisecond {
		return errorf("Config.ProbeLease must be 0 or >= 10ms, got %v", c.ProbeLease)
	}
	return nil
}

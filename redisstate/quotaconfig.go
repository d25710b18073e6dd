package redisstate

import (
	"context"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/policy"
)

// QuotaConfig configures a [Quota]. Its zero value is not valid: Name,
// Redis.Client, Interval and Requests or Tokens must be set. A QuotaConfig
// is read once, by [NewQuota].
type QuotaConfig struct {
	// Name names the quota: the watertight.policy.name attribute,
	// RejectedError.Name, and the identity of the shared state in Redis
	// (every replica of one quota must use the same Name and settings). It
	// must not be empty.
	Name string

	// Redis says how to reach Redis. Redis.Client is required.
	Redis Redis

	// Interval is the period the quota is given per: a minute for a
	// provider's requests and tokens per minute. It must be > 0.
	Interval time.Duration

	// Requests is the number of attempts admitted per Interval across
	// every replica, paced evenly, in bursts of at most Burst. 0 means no
	// request quota. It must be a finite number >= 0.
	Requests float64
	// Burst is the most attempts admitted at once. 0 means the quota of
	// one second (Requests x 1s / Interval, rounded up), or the whole
	// quota if Interval is shorter: providers enforce a per-minute quota
	// in shorter slices. It must be >= 0.
	Burst int

	// Tokens is the number of tokens admitted per Interval across every
	// replica: each attempt is charged its declared cost
	// (ratelimit.WithCost) as it is admitted, and settled at what it used
	// as it ends. 0 means no token quota. It must be a finite number >= 0.
	Tokens float64
	// TokenBurst is the most tokens drawn at once. 0 means the quota of
	// one second, as Burst's. It must be >= 0. An attempt whose cost is
	// larger waits until TokenBurst is free, and leaves the rest as debt.
	TokenBurst int

	// Fallback is what happens to an attempt while Redis cannot be asked.
	// The zero value is [LocalShare]: this replica paces itself to its
	// share of the quota.
	Fallback Fallback

	// Replicas, if > 0, is the number of replicas the LocalShare fallback
	// divides the quota by. 0 means the live replicas Redis last reported
	// (1, the whole quota, if it never answered). Negative is invalid.
	Replicas int

	// Replica identifies this replica in Redis. Empty means a random one.
	Replica string

	// MeterProvider provides the instruments. Nil means the global one.
	MeterProvider metric.MeterProvider

	// OnReject, if not nil, is called after every rejection by the quota,
	// on the caller's goroutine, with the caller's ctx and the prepared
	// error, which must not be modified.
	OnReject func(ctx context.Context, err *policy.RejectedError)
}

// validate reports the first invalid field of c.
func (c *QuotaConfig) validate() error {
	switch {
	case c.Name == "":
		return errorf("QuotaConfig.Name must not be empty: it names the quota's shared state in Redis")
	case c.Interval <= 0:
		return errorf("QuotaConfig.Interval must be > 0, got %v", c.Interval)
	case !(c.Requests >= 0) || math.IsInf(c.Requests, 0):
		return errorf("QuotaConfig.Requests must be a finite number >= 0, got %v", c.Requests)
	case !(c.Tokens >= 0) || math.IsInf(c.Tokens, 0):
		return errorf("QuotaConfig.Tokens must be a finite number >= 0, got %v", c.Tokens)
	case c.Requests == 0 && c.Tokens == 0:
		return errorf("QuotaConfig.Requests and QuotaConfig.Tokens are both 0: set one or both")
	case c.Burst < 0:
		return errorf("QuotaConfig.Burst must be >= 0, got %d", c.Burst)
	case c.TokenBurst < 0:
		return errorf("QuotaConfig.TokenBurst must be >= 0, got %d", c.TokenBurst)
	case c.Fallback < LocalShare || c.Fallback > FailClosed:
		return errorf("QuotaConfig.Fallback must be LocalShare, FailOpen or FailClosed, got %d", int(c.Fallback))
	case c.Replicas < 0:
		return errorf("QuotaConfig.Replicas must be >= 0, got %d", c.Replicas)
	}
	return nil
}

// oneSecond returns b, or if b is 0 the quota q per interval of one
// second rounded up, at least 1 and at most q rounded up.
func oneSecond(b int, q float64, interval time.Duration) float64 {
	if b > 0 {
		return float64(b)
	}
	per := math.Ceil(q)
	if interval > time.Second {
		per = math.Ceil(q * float64(time.Second) / float64(interval))
	}
	return max(per, 1)
}

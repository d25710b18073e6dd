package redisstate

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
)

// DefaultLeaseTTL is BudgetConfig.LeaseTTL's default.
const DefaultLeaseTTL = 15 * time.Second

// Fallback is what a [Budget] does with a call when Redis cannot be asked
// (it failed, timed out, or its local breaker is open). The zero value is
// [LocalShare].
type Fallback int

// The fallback modes of a Budget.
const (
	// LocalShare admits the call if this replica has fewer than its share
	// of the limit in flight (leased calls included): BudgetConfig.LocalShare,
	// or else ceil(Limit / R), R being the number of live replicas Redis
	// last reported (1, so the whole Limit, if Redis never answered). A
	// call over the share is rejected with reason "full" at once.
	//
	// Redis counts a replica from its first acquire until 3 x LeaseTTL (at
	// least 30 s) after its last. Its count is complete once it has been
	// counting that long: at Redis's first start, after Redis lost its
	// data, and after every replica had lapsed (a quiet spell), it counts
	// afresh, and the count is incomplete until then. A replica keeps the
	// count of its latest complete answer (by Redis's clock, whatever the
	// order the answers arrive in), raised by each incomplete answer since;
	// 1 if it has none. The shares add up to
	// at most Limit plus one per replica if each replica that calls while
	// Redis is away holds a count of at least the number of those
	// replicas. A replica holds a lower count if others started after its
	// last answer, or if Redis never answered it (1), or if it has had no
	// complete answer and its incomplete ones all came before the others
	// called (as low as 1: the first replica to call at start-up, when
	// Redis restarts empty before its count completes). Its share is then
	// larger, up to the whole Limit. Set BudgetConfig.LocalShare where
	// that matters.
	LocalShare Fallback = iota
	// FailOpen admits every call: only the local bulkhead, if any, limits.
	FailOpen
	// FailClosed rejects every call, with reason "redis_unavailable".
	FailClosed
)

// String returns "local_share", "fail_open" or "fail_closed", the value of
// the watertight.redis.fallback.mode attribute.
func (f Fallback) String() string {
	switch f {
	case LocalShare:
		return "local_share"
	case FailOpen:
		return "fail_open"
	case FailClosed:
		return "fail_closed"
	}
	return "redisstate.Fallback(?)"
}

// BudgetConfig configures a [Budget]. Its zero value is not valid: Name,
// Redis.Client and Limit must be set. A BudgetConfig is read once, by
// [NewBudget].
type BudgetConfig struct {
	// Name names the budget: the watertight.policy.name attribute,
	// RejectedError.Name, and the identity of the shared state in Redis
	// (every replica of one budget must use the same Name and Limit). It
	// must not be empty.
	Name string

	// Redis says how to reach Redis. Redis.Client is required.
	Redis Redis

	// Limit is the number of calls that may be in flight at once across
	// every replica. It must be >= 1.
	Limit int

	// Local, if not nil, is a local bulkhead consulted first: a call takes
	// a slot in it, then a lease in Redis, so that one Bulkhead slot of a
	// pipeline holds both. Its rejections are returned as they are. The
	// Budget does not close it.
	Local *bulkhead.Bulkhead

	// LeaseTTL is how long a lease lasts unless renewed: a crashed
	// replica's leases lapse after at most LeaseTTL, and a running call's
	// lease is renewed every LeaseTTL/3. 0 means [DefaultLeaseTTL] (15 s);
	// it must be 0 or at least 30 ms.
	LeaseTTL time.Duration

	// MaxWait is how long a call may wait for a lease when all Limit are
	// held, asking Redis again with a growing pause (1 ms doubling to
	// 50 ms). 0 means no wait: the call is rejected with reason "full" at
	// once. A call that waits in vain is rejected with reason
	// "wait_timeout". Negative is invalid.
	MaxWait time.Duration

	// Fallback is what happens to a call while Redis cannot be asked. The
	// zero value is [LocalShare].
	Fallback Fallback

	// LocalShare is the number of calls this replica may have in flight
	// under the LocalShare fallback. 0 means ceil(Limit / live replicas),
	// from what Redis reported (see [LocalShare]). Negative is invalid.
	LocalShare int

	// Replica identifies this replica in Redis. Empty means a random one.
	Replica string

	// MeterProvider provides the instruments. Nil means the global one.
	MeterProvider metric.MeterProvider

	// OnReject, if not nil, is called after every rejection by the budget
	// itself (not by Local, which has its own), on the caller's goroutine,
	// with the caller's ctx and the prepared error, which must not be
	// modified.
	OnReject func(ctx context.Context, err *policy.RejectedError)
}

// validate reports the first invalid field of c.
func (c *BudgetConfig) validate() error {
	if c.Name == "" {
		return errorf("Config.Name must not be empty: it names the budget's shared state in Redis")
	}
	if c.Limit < 1 {
		return errorf("Config.Limit must be >= 1, got %d", c.Limit)
	}
	if c.LeaseTTL != 0 && c.LeaseTTL < 30*time.Millisecond {
		return errorf("Config.LeaseTTL must be 0 or >= 30ms, got %v", c.LeaseTTL)
	}
	if c.MaxWait < 0 {
		return errorf("Config.MaxWait must be >= 0, got %v", c.MaxWait)
	}
	if c.Fallback < LocalShare || c.Fallback > FailClosed {
		return errorf("Config.Fallback must be LocalShare, FailOpen or FailClosed, got %d", int(c.Fallback))
	}
	if c.LocalShare < 0 {
		return errorf("Config.LocalShare must be >= 0, got %d", c.LocalShare)
	}
	return nil
}

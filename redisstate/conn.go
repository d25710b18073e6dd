package redisstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/statuspage"
)

// Defaults of [Redis]'s zero fields.
const (
	// DefaultTripAfter is Redis.TripAfter's default.
	DefaultTripAfter uint32 = 3
	// DefaultRetryAfter is Redis.RetryAfter's default.
	DefaultRetryAfter = time.Second
)

// Redis says how a policy reaches Redis. Only Client is required; its zero
// value is not valid. It is read once, by the policy's New.
type Redis struct {
	// Client is the go-redis client: a *redis.Client, *redis.ClusterClient,
	// *redis.Ring or a Sentinel failover client. It must not retry failed
	// calls and must let a context's deadline bound its socket reads:
	// build it with [NewClient]. A *redis.Client or *redis.ClusterClient
	// without ContextTimeoutEnabled is refused by New. The policy never
	// closes it.
	Client redis.UniversalClient

	// CallTimeout is the deadline of every round trip to Redis. 0 means
	// [DefaultCallTimeout] (20 ms); negative is invalid. The client's own
	// read and write timeouts still apply: one from [NewClient] ends a
	// round trip after 100 ms unless built with longer ones.
	CallTimeout time.Duration

	// TripAfter is the number of failed round trips in a row (errors or
	// timeouts) that opens the local breaker on Redis, after which no
	// round trip is tried, and the policy runs on its fallback, for
	// RetryAfter. 0 means [DefaultTripAfter] (3).
	TripAfter uint32

	// RetryAfter is how long the local breaker on Redis stays open before
	// one round trip tries Redis again. 0 means [DefaultRetryAfter] (1 s);
	// negative is invalid.
	RetryAfter time.Duration
}

// errUnavailable is the error of a round trip the local breaker on Redis
// refused, or that failed: Redis did not answer in time.
var errUnavailable = errors.New("redisstate: redis unavailable")

// conn is a policy's guarded access to Redis: every round trip has a
// deadline and goes through a local breaker.
type conn struct {
	client  redis.UniversalClient
	timeout time.Duration
	guard   *breaker.Breaker

	version versionCheck // what the server's version is known to be

	// answeredAt is when the last round trip Redis answered ended, and
	// downAt when the first one that failed after it ended, in Unix ns
	// (0: none). They cost an atomic store per round trip, for Report.
	answeredAt atomic.Int64
	downAt     atomic.Int64
}

// newConn validates r and returns its conn. The guard breaker is named
// "redis:<kind>:<name>" in telemetry.
func newConn(r Redis, kind, name string, mp metric.MeterProvider) (*conn, error) {
	if err := checkClient("Config.Redis.Client", r.Client); err != nil {
		return nil, err
	}
	if r.CallTimeout < 0 {
		return nil, errorf("Config.Redis.CallTimeout must be >= 0, got %v", r.CallTimeout)
	}
	if r.RetryAfter < 0 {
		return nil, errorf("Config.Redis.RetryAfter must be >= 0, got %v", r.RetryAfter)
	}
	c := &conn{client: r.Client, timeout: r.CallTimeout}
	if c.timeout == 0 {
		c.timeout = DefaultCallTimeout
	}
	trip, retry := r.TripAfter, r.RetryAfter
	if trip == 0 {
		trip = DefaultTripAfter
	}
	if retry == 0 {
		retry = DefaultRetryAfter
	}
	g, err := breaker.New(breaker.Config{
		Name:                "redis:" + kind + ":" + name,
		ConsecutiveFailures: trip,
		OpenTimeout:         retry,
		// A nil reply (redis.Nil) is an answer; everything else (a
		// timeout, a refused connection, LOADING, READONLY) is not.
		IsFailure:     func(err error) bool { return !errors.Is(err, redis.Nil) },
		MeterProvider: mp,
	})
	if err != nil {
		return nil, fmt.Errorf("redisstate: %w", err)
	}
	c.guard = g
	return c, nil
}

// do runs one round trip f under the call deadline and the guard, after
// the server's version check if it has not passed yet (or a script error
// of an older server has put it in doubt). It returns nil, redis.Nil,
// ctx's own error if ctx is done, or errUnavailable wrapping the cause
// (ErrRedisTooOld for a server too old).
func (c *conn) do(ctx context.Context, f func(ctx context.Context) error) error {
	if !c.version.ok.Load() {
		if err := c.checkVersion(ctx); err != nil {
			return err
		}
	}
	err := c.roundTrip(ctx, f)
	if err != nil && !errors.Is(err, redis.Nil) {
		c.versionDoubt(err)
	}
	return err
}

// roundTrip is do without the version check.
func (c *conn) roundTrip(ctx context.Context, f func(ctx context.Context) error) error {
	err := c.guard.Execute(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		return f(ctx)
	})
	if err == nil || errors.Is(err, redis.Nil) {
		c.answered()
		return err
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr // the caller gave up: nothing learnt of Redis
	}
	if !errors.Is(err, breaker.ErrOpen) { // the guard refused: nothing was sent
		c.downAt.CompareAndSwap(0, time.Now().UnixNano())
	}
	return fmt.Errorf("%w: %w", errUnavailable, err)
}

// answered records a round trip Redis answered. It loads downAt before
// storing to it, so that a steady stream of answers does not write the
// same cache line from every core.
func (c *conn) answered() {
	c.answeredAt.Store(time.Now().UnixNano())
	if c.downAt.Load() != 0 {
		c.downAt.Store(0)
	}
}

// reachability returns the "redis" and "redis last answer" fields of a
// Report. Redis is unreachable when the last round trip failed: no answer
// in time, or an error reply (redis.Nil aside), as the guard counts them.
func (c *conn) reachability() []statuspage.Field {
	at, down := c.answeredAt.Load(), c.downAt.Load()
	last := statuspage.Field{Name: "redis last answer", Value: "never"}
	if at != 0 {
		last.Value = time.Unix(0, at).Format(time.TimeOnly)
	}
	switch {
	case down != 0:
		return []statuspage.Field{{Name: "redis", Value: "unreachable since " + time.Unix(0, down).Format(time.TimeOnly), Alert: true}, last}
	case at == 0:
		return []statuspage.Field{{Name: "redis", Value: "not asked yet"}, last}
	}
	return []statuspage.Field{{Name: "redis", Value: "reachable"}, last}
}

// close releases the guard's gauge.
func (c *conn) close() { c.guard.Close() }

// newReplicaID returns a random replica identity, 16 hex digits.
func newReplicaID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errorf returns an error whose message has the package's prefix.
func errorf(format string, args ...any) error {
	return fmt.Errorf("redisstate: "+format, args...)
}

// keyPrefix returns the prefix of every key of the policy (kind, name): a
// hash tag, so that all its keys fall in one Redis Cluster slot.
func keyPrefix(kind, name string) string {
	return "{watertight:" + kind + ":" + name + "}:"
}

package redisstate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
)

// MinRedisMajor is the oldest major version of Redis this package works
// with: its scripts read TIME and then write, which Redis allows from 5.0
// on (it replicates a script's effects, not the script, by default since
// 5.0; 4.0 refuses the write with "Write commands not allowed after non
// deterministic commands").
const MinRedisMajor = 5

// ErrRedisTooOld matches (with [errors.Is]) the error of [CheckVersion],
// and of every round trip of a policy, when the Redis server is older than
// [MinRedisMajor]. The error's message names the server's version.
var ErrRedisTooOld = errors.New("redisstate: Redis 5.0 or later is needed")

// versionError is a server too old, with its version.
type versionError struct{ version string }

func (e *versionError) Error() string {
	return "redisstate: the Redis server is version " + e.version +
		": this package's scripts need Redis 5.0 or later (they write after reading TIME)"
}

func (e *versionError) Is(target error) bool { return target == ErrRedisTooOld }

// CheckVersion asks the server behind client for its version (INFO
// server) and returns an error matching [ErrRedisTooOld] and naming the
// version if it is older than 5.0. It returns nil if the server is 5.0 or
// later, and also where the version cannot be detected: a server or proxy
// that refuses INFO (an error reply), or whose INFO has no parsable
// redis_version; with such a server, too old a Redis shows as the
// policies' script errors instead. Any other error is the round trip's.
// With a Cluster or Ring client, INFO goes to one node, which stands for
// all. The policies run the same check before their first round trip to
// Redis (see [Budget] and [SharedBreaker]); call it at start-up to fail
// fast. It is safe for concurrent use.
func CheckVersion(ctx context.Context, client redis.UniversalClient) error {
	if err := checkClient("client", client); err != nil {
		return err
	}
	v, err := serverVersion(ctx, client)
	if err != nil {
		return err
	}
	return versionErr(v)
}

// serverVersion returns the server's redis_version, or "" if it cannot be
// told: an error reply to INFO, or no redis_version in it.
func serverVersion(ctx context.Context, client redis.UniversalClient) (string, error) {
	info, err := client.Info(ctx, "server").Result()
	if err != nil {
		var reply redis.Error
		if errors.As(err, &reply) && !errors.Is(err, redis.Nil) && refusal(reply.Error()) {
			return "", nil // refused for good: undetectable
		}
		return "", err // no answer, or a passing state (LOADING, BUSY...)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", nil
}

// refusal reports whether msg, an error reply to INFO, refuses it for
// good: an unknown or renamed command (a proxy), or an ACL that forbids
// it. LOADING, BUSY, MASTERDOWN, NOAUTH and the like pass, or are the
// setup's error, and are asked again.
func refusal(msg string) bool {
	return strings.HasPrefix(msg, "ERR ") || strings.HasPrefix(msg, "NOPERM")
}

// versionErr returns the error of a server of version v ("" if unknown):
// nil unless v parses and is older than MinRedisMajor.
func versionErr(v string) error {
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	if err != nil || n >= MinRedisMajor {
		return nil
	}
	return &versionError{version: v}
}

// checkVersion runs CheckVersion's check once for the conn, through the
// guard, before its first round trip: nil once the server has passed (or
// cannot be told), the round trip's error while it cannot be asked, and
// for a server too old, that error for good, without a round trip (it is
// reported once to otel.Handle).
func (c *conn) checkVersion(ctx context.Context) error {
	if e := c.tooOld.Load(); e != nil {
		return fmt.Errorf("%w: %w", errUnavailable, e)
	}
	var v string
	if err := c.roundTrip(ctx, func(ctx context.Context) error {
		var err error
		v, err = serverVersion(ctx, c.client)
		return err
	}); err != nil {
		return err
	}
	err := versionErr(v)
	if err == nil {
		c.versionOK.Store(true)
		return nil
	}
	e := err.(*versionError)
	if c.tooOld.CompareAndSwap(nil, e) {
		otel.Handle(err)
	}
	return fmt.Errorf("%w: %w", errUnavailable, err)
}

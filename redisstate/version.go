package redisstate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
)

// MinRedisMajor is the oldest major version of Redis this package works
// with. Its scripts read TIME and then write, which Redis allows from 5.0
// on.
const MinRedisMajor = 5

// ErrRedisTooOld matches (with [errors.Is]) the error of [CheckVersion]
// when the Redis server is older than [MinRedisMajor]. It also matches the
// error of every round trip of a policy while the server is known to be
// so, and a [FailClosed] Budget's rejection wraps it. The error's message
// names the server's version.
var ErrRedisTooOld = errors.New("redisstate: Redis 5.0 or later is needed")

// versionError is a server too old, with its version.
type versionError struct{ version string }

func (e *versionError) Error() string {
	return "redisstate: the Redis server is version " + e.version +
		": this package's scripts need Redis 5.0 or later (they write after reading TIME)"
}

func (e *versionError) Is(target error) bool { return target == ErrRedisTooOld }

// versionRecheck is how long a policy takes a server's "too old" for
// the answer before it asks again: an upgrade is noticed within that
// time, without a restart.
const versionRecheck = 30 * time.Second

// versionClock, if set, is the version check's clock instead of
// time.Now (the tests' fake clock).
var versionClock atomic.Pointer[func() time.Time]

// versionNow returns the version check's time.
func versionNow() time.Time {
	if f := versionClock.Load(); f != nil {
		return (*f)()
	}
	return time.Now()
}

// CheckVersion asks the server behind client for its version (INFO
// server). It returns an error matching [ErrRedisTooOld] and naming the
// version if it is older than 5.0. It returns nil if the server is 5.0 or
// later, and also if the version cannot be detected: a server or proxy
// refuses INFO for good (an unknown, renamed or unsupported command, or an
// ACL's NOPERM), or its INFO has no parsable redis_version. Any other
// error is the round trip's, an error reply included (LOADING, BUSY...).
// With a Cluster or Ring client, INFO goes to one node, which stands for
// all. The policies run the same check themselves; call it at start-up to
// fail fast. It is safe for concurrent use.
func CheckVersion(ctx context.Context, client redis.UniversalClient) error {
	if err := checkClient("CheckVersion's client", client); err != nil {
		return err
	}
	v, err := serverVersion(ctx, client)
	if err != nil {
		return err
	}
	return versionErr(v)
}

// serverVersion returns the server's redis_version, or "" if it cannot be
// told: INFO refused for good, or no redis_version in it.
func serverVersion(ctx context.Context, client redis.UniversalClient) (string, error) {
	info, err := client.Info(ctx, "server").Result()
	if err != nil {
		var reply redis.Error
		if errors.As(err, &reply) && !errors.Is(err, redis.Nil) && refusal(reply.Error()) {
			return "", nil // refused for good: undetectable
		}
		return "", err // no answer, or a passing state (LOADING, BUSY, max clients...)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", nil
}

// refusal reports whether msg, an error reply to INFO, refuses it for
// good: an unknown or renamed command ("ERR unknown command 'INFO'", as a
// rename-command or a proxy answers), an unsupported one (a proxy's
// "unsupported command"), or an ACL that forbids it (NOPERM). Every other
// error reply (ERR max number of clients reached, LOADING, BUSY,
// MASTERDOWN, NOAUTH...) passes, or is the setup's error, and INFO is
// asked again.
func refusal(msg string) bool {
	if strings.HasPrefix(msg, "NOPERM") {
		return true
	}
	m := strings.ToLower(msg)
	return strings.Contains(m, "unknown command") || strings.Contains(m, "unsupported command") ||
		strings.Contains(m, "unknown subcommand")
}

// oldServerReply reports whether err, a round trip's error, is a script
// error that a server older than the one checked would give: a write after
// TIME refused (Redis 4 and older), or a command the scripts need
// unknown. A failover to an older node shows so; the version is asked
// again.
func oldServerReply(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) || errors.Is(err, redis.Nil) {
		return false
	}
	m := reply.Error()
	return strings.Contains(m, "Write commands not allowed after non deterministic commands") ||
		strings.Contains(strings.ToLower(m), "unknown redis command called from") ||
		strings.HasPrefix(m, "ERR unknown command")
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

// versionCheck is a conn's knowledge of its server's version, and the one
// INFO round trip in flight that updates it. The zero value knows
// nothing: the next round trip asks.
type versionCheck struct {
	ok     atomic.Bool // the server passed (or cannot be told); cleared by a script error of an old server
	mu     sync.Mutex
	tooOld *versionError  // under mu: the last answer was too old...
	until  time.Time      // ...and is taken for the answer until then
	flight *versionFlight // under mu: the INFO round trip in flight
}

// versionFlight is one INFO round trip that every caller who needs the
// version meanwhile waits for.
type versionFlight struct {
	done chan struct{}
	err  error
}

// checkVersion runs CheckVersion's check for the conn, through the guard,
// before its first round trip, and again once the answer is stale: nil
// once the server has passed (or cannot be told), the round trip's error
// while it cannot be asked, and for a server too old, that error (wrapped
// in errUnavailable) without a round trip for versionRecheck, then one
// INFO again. Concurrent callers share one INFO round trip. A server
// newly found too old is reported to otel.Handle.
func (c *conn) checkVersion(ctx context.Context) error {
	v := &c.version
	v.mu.Lock()
	if v.ok.Load() {
		v.mu.Unlock()
		return nil
	}
	if v.tooOld != nil && versionNow().Before(v.until) {
		e := v.tooOld
		v.mu.Unlock()
		return fmt.Errorf("%w: %w", errUnavailable, e)
	}
	if f := v.flight; f != nil {
		v.mu.Unlock()
		select {
		case <-f.done:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f := &versionFlight{done: make(chan struct{}), err: errUnavailable}
	v.flight = f
	v.mu.Unlock()
	c.askVersion(ctx, f)
	return f.err
}

// askVersion runs the INFO round trip of flight f, records its answer,
// and ends f (also if something in it panics: f's error is then
// errUnavailable's).
func (c *conn) askVersion(ctx context.Context, f *versionFlight) {
	v := &c.version
	var report error
	defer func() {
		v.mu.Lock()
		v.flight = nil
		v.mu.Unlock()
		close(f.done)
		if report != nil {
			otel.Handle(report)
		}
	}()
	var version string
	err := c.roundTrip(ctx, func(ctx context.Context) error {
		var err error
		version, err = serverVersion(ctx, c.client)
		return err
	})
	if err != nil {
		f.err = err // not known: the next round trip asks again
		return
	}
	err = versionErr(version)
	v.mu.Lock()
	defer v.mu.Unlock()
	if err == nil {
		v.tooOld = nil
		v.ok.Store(true)
		f.err = nil
		return
	}
	e := err.(*versionError)
	if v.tooOld == nil || v.tooOld.version != e.version {
		report = err // newly too old: told once, not every versionRecheck
	}
	v.tooOld, v.until = e, versionNow().Add(versionRecheck)
	f.err = fmt.Errorf("%w: %w", errUnavailable, err)
}

// versionDoubt is called with a round trip's error: a script error of an
// older server than the one checked (a failover to an older node) makes
// the next round trip ask the version again.
func (c *conn) versionDoubt(err error) {
	if oldServerReply(err) {
		c.version.ok.Store(false)
	}
}

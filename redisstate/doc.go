// Package redisstate shares a policy's state across the replicas of a
// service through Redis, with Redis kept off the hot path. It provides two
// policies:
//
//   - a [Budget], a global concurrency limit for the Bulkhead slot: at most
//     N calls in flight across every replica, held as leases with expiry;
//   - a [SharedBreaker], a circuit breaker for the Breaker slot that decides
//     locally on every call and opens on every replica once a quorum of
//     them has tripped.
//
// It is a module of its own (github.com/watertight/watertight/redisstate)
// so that the core module never needs a Redis client. It talks to Redis
// through github.com/redis/go-redis/v9's UniversalClient: a single server,
// Sentinel or Cluster. Every key of one policy carries the same hash tag,
// {watertight:<kind>:<name>}, so the multi-key scripts run on one Cluster
// slot.
//
// # In a pipeline
//
// In a compose pipeline, a Budget or a SharedBreaker runs through its
// Execute, as any policy does. Execute holds what it took (a lease and a
// Local slot, or the local breaker's permit) while fn runs. It gives it
// back when fn returns, panics or calls runtime.Goexit; a panic or Goexit
// counts as a failure of the shared breaker. Through httppolicy's
// Transport, every policy holds until the response body ends.
//
// # Redis time, Redis off the hot path
//
// Every expiry (a lease, a trip, an open period) is scored by Redis TIME in
// a Lua script, never by a replica's clock. A replica turns a remaining
// duration it reads from Redis into a deadline on its own clock.
//
// The budget costs two round trips per admitted call (acquire, release),
// and a renewal every LeaseTTL/3 while a call runs. The shared breaker
// costs no round trip on a call. A background goroutine reports trips and
// probe verdicts, and opens reach the other replicas by pub/sub, with
// polling as a fallback.
//
// # When Redis is slow or down
//
// Every round trip has a short deadline ([DefaultCallTimeout]) and goes
// through a local circuit breaker on Redis itself. So a dead or frozen
// Redis costs nothing per call once it has failed a few times in a row.
// The client must not retry, and a context deadline must bound its socket
// reads. [NewClient] builds such a client. New refuses a *redis.Client or
// *redis.ClusterClient without ContextTimeoutEnabled.
//
// While Redis is unreachable, the shared breaker runs on its local state
// alone, and the budget falls back to its [Fallback] mode. Each fallback
// is counted (watertight.redis.fallbacks) and adds a
// watertight.redis.fallback event to the span in ctx. When Redis answers
// again, the state converges without a restart.
//
// Each policy is a statuspage.Reporter: on a status page, its Report
// shows its local view and whether Redis is reachable. Redis is
// unreachable when the policy's last round trip failed (no answer in
// time, or an error reply), from that failure until a round trip is
// answered. A round trip the local breaker on Redis refused sends
// nothing and changes nothing. Recording each outcome costs an atomic
// store per round trip; Report reads atomics and never asks Redis.
//
// # Redis 5 or later
//
// The scripts write after reading TIME, which Redis allows from 5.0 on.
// Each policy asks the server's version (INFO server) before its first
// round trip; concurrent callers share one INFO.
//
//   - A server older than 5.0 gets no script while it is known to be too
//     old. Every round trip fails at once with an error matching
//     [ErrRedisTooOld] that names the version, and the policy runs on its
//     fallback; a [FailClosed] Budget's rejection wraps that error.
//     otel.Handle is told once per version found. The answer holds for
//     30 s, then INFO is asked again, so an upgrade is noticed without a
//     restart.
//   - A server that passed is not asked again while its scripts run. A
//     failover to an older node shows as a script error, and that round
//     trip fails as any failed round trip does. The next one asks the
//     version again, so a downgrade costs one failed script per policy.
//   - A server that refuses INFO for good (an unknown, renamed or
//     unsupported command, an ACL's NOPERM), or whose INFO has no parsable
//     redis_version, cannot be checked and is let through. Too old a Redis
//     then shows as script errors, which ask again as after a failover.
//     Any other error reply to INFO (LOADING, say) is a failed round trip,
//     and the next round trip asks.
//
// [CheckVersion] runs the same check, to fail at start-up.
package redisstate

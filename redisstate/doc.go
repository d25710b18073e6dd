// Package redisstate shares a policy's state across the replicas of a
// service through Redis, with Redis kept off the hot path. It provides
// three policies:
//
//   - a [Budget], a global concurrency limit for the Bulkhead slot: at most
//     N calls in flight across every replica, held as leases with expiry;
//   - a [SharedBreaker], a circuit breaker for the Breaker slot that decides
//     locally on every call and opens on every replica once a quorum of
//     them has tripped;
//   - a [Quota], a rate quota in requests and tokens per interval for the
//     whole fleet, which a ratelimit.Limiter asks through its Config.Shared.
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
// # A shared quota
//
// A [Quota] keeps one bucket per quota in Redis, as a GCRA: the bucket is
// one number, the Redis time (in microseconds) at which its next unit is
// free, so an admission reads and writes one key per quota in one script,
// and the quota holds no record per request. Its burst is how far that
// time may run ahead of now. A Limiter asks the Quota after its own hold,
// gate and rates, and the Quota admits the attempt in one round trip:
//
//   - If the attempt can be admitted within its bound (its MaxWait counted
//     from when it entered the Limiter, just before its deadline, and at
//     most one Interval), the script charges it one request and its
//     declared tokens (a cost above one Interval's token quota counts as
//     that quota), and the attempt waits its turn, then runs. A caller
//     that gives up during that wait gives them back. A round trip that
//     gets no answer (the caller gave up, CallTimeout passed) may have
//     been run by Redis all the same: its attempt stays charged there,
//     so the fleet is charged more, never less.
//   - Otherwise nothing is charged, and the attempt is rejected at once
//     with reason "rate", or "throttled" if a hold made the wait.
//
// Tokens are settled as ratelimit's package doc says: at the attempt's
// usage (ratelimit.ReportUsage), or at its declared cost if it succeeded,
// or at 0 if it failed. The difference rides on the replica's next round
// trip, or is sent within 200 ms if none comes, so an attempt costs one
// round trip. A usage above one Interval's token quota is not believed:
// the attempt settles at its cost. A replica that crashes before its
// settlements are sent leaves its attempts charged their declared costs:
// nothing else is held, and the bucket refills past them at the quota's
// rate.
//
// A hold that a Limiter sets (a 429's Retry-After, rate-limit headers
// that say the quota is spent) is passed to [Quota.Hold], written to Redis
// at once by the Quota's goroutine, and every replica's attempts wait it
// out in the Quota, or are rejected with reason "throttled" if they
// cannot. An attempt waits for the longest of its own Limiter's hold and
// gate, the fleet's hold, and the shared buckets' turn.
//
// While Redis cannot be asked, the Quota runs on its [Fallback] mode, and
// what a fallback admitted is owed to Redis: once Redis answers, it is
// charged to the shared buckets as spread over the time it was owed, so
// that an outage neither lets the fleet burst past the quota when Redis
// is back nor stalls it.
//
//   - LocalShare: the replica paces itself to 1/R of the quota and of the
//     burst (at least 1), R being [QuotaConfig.Replicas] or the live
//     replicas Redis last reported (it counts a replica until 30 s after
//     its last round trip; see [LocalShare] for how a count is kept).
//     While every replica holds the same R, the fleet is admitted at most
//     the quota, Redis's burst and the shares' bursts (the burst, or R if
//     that is larger: each share bursts at least 1) in any Interval.
//   - FailOpen: every attempt is admitted; only the Limiter's own rates
//     limit.
//   - FailClosed: every attempt is rejected with reason
//     "redis_unavailable"; the fleet is admitted at most the quota plus
//     its burst in any Interval.
//
// Redis is asked again after Redis.RetryAfter, so each replica is back on
// the shared quota within one RetryAfter of Redis answering. No attempt
// waits for Redis past its deadline: a round trip ends at the attempt's
// deadline or CallTimeout, and an attempt whose deadline comes while it
// waits gets its ctx's error.
//
// Each time Redis loses the quota's keys (a restart without persistence,
// a failover), its buckets start full again: add one burst to the bounds
// above.
//
// A value in the quota's buckets or hold that is not a number (or not a
// string) counts as none; one further ahead than the burst plus two
// Intervals counts as that far, and is written back so, with its expiry.
// A forged value can hold the fleet for no longer. A replica in the
// replica count whose expiry lies further ahead than 30 s is dropped.
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

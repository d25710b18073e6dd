// Package redisstate shares a policy's state across the replicas of a
// service through Redis, with Redis kept off the hot path: a [Budget], a
// global concurrency limit for the Bulkhead slot (at most N calls in
// flight across every replica, held as leases with expiry), and a
// [SharedBreaker], a circuit breaker for the Breaker slot that decides
// locally on every call and opens on every replica once a quorum of them
// has tripped.
//
// It is a module of its own (github.com/watertight/watertight/redisstate)
// so that the library's go.mod never needs a Redis client. It talks to
// Redis through github.com/redis/go-redis/v9's UniversalClient, so a single
// server, Sentinel or Cluster setup can be used; every key of one policy
// carries the same hash tag, {watertight:<kind>:<name>}, so the multi-key
// scripts run on one Cluster slot.
//
// # Redis time, Redis off the hot path
//
// Every expiry (a lease, a trip, an open period) is scored by Redis TIME in
// a Lua script, never by a replica's clock; a replica turns a remaining
// duration it reads from Redis into a deadline on its own clock. The
// budget costs two round trips per admitted call (acquire, release) and a
// renewal every LeaseTTL/3 while a call runs; the shared breaker costs none
// on a call: trips and probe verdicts are reported by a background
// goroutine, and opens reach the other replicas by pub/sub, with polling as
// a fallback.
//
// # When Redis is slow or down
//
// Every round trip has a short deadline ([DefaultCallTimeout], 20 ms) and
// goes through a local circuit breaker on Redis itself, so that a dead or
// frozen Redis costs nothing per call once it has failed a few times in a
// row. The client must not retry and must let a context deadline bound its
// socket reads: [NewClient] builds one so (ContextTimeoutEnabled, MaxRetries
// off), and New refuses a *redis.Client or *redis.ClusterClient without
// ContextTimeoutEnabled. The shared breaker then runs on its local state
// alone; the budget falls back to its [Fallback] mode. Each fallback is
// counted (watertight.redis.fallbacks) and adds a watertight.redis.fallback
// event to the span in ctx. When Redis answers again, the state converges
// without a restart.
//
// # Redis 5 or later
//
// The scripts write after reading TIME, which Redis allows from 5.0 on.
// Each policy asks the server's version (INFO server) before its first
// round trip; a server older than 5.0 gets no script, ever: every round
// trip fails at once with an error matching [ErrRedisTooOld] that names
// the version (the policy runs on its fallback, as when Redis is down),
// and otel.Handle is told once. [CheckVersion] runs the same check, to
// fail at start-up. A server or proxy that refuses INFO, or reports no
// redis_version, cannot be checked: it is let through.
package redisstate

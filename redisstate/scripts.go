package redisstate

import "github.com/redis/go-redis/v9"

// Every script reads the time from Redis (TIME), never from a replica, and
// works in milliseconds. Redis 5 and later replicate a script's effects,
// not the script, so a script that writes after reading TIME is allowed.

// nowMS is the Lua prelude that sets now to Redis's time in milliseconds.
const nowMS = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// acquireScript takes a lease if fewer than limit are held.
//
//	KEYS[1] leases (ZSET lease id -> expiry), KEYS[2] replicas (ZSET
//	replica id -> expiry)
//	ARGV limit, lease TTL ms, lease id, replica id, replica TTL ms
//
// It drops expired leases and replicas, records the replica as alive, and
// returns {1 if the lease was taken else 0, live replicas}.
var acquireScript = redis.NewScript(nowMS + `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
local r = redis.call('ZCARD', KEYS[2])
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, r}
end
return {0, r}
`)

// renewScript pushes a held lease's expiry to now + TTL; a lease that has
// lapsed (or was released) is not brought back.
//
//	KEYS[1] leases; ARGV lease id, lease TTL ms
//
// It returns 1 if the lease was renewed, 0 if it was gone.
var renewScript = redis.NewScript(nowMS + `
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

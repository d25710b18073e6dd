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
//	replica id -> expiry), KEYS[3] since (when the replicas began to be
//	counted afresh)
//	ARGV limit, lease TTL ms, lease id, replica id, replica TTL ms
//
// It drops expired leases and replicas, records the replica as alive, and
// returns {1 if the lease was taken else 0, live replicas, 1 if the count
// is complete else 0, now} (see replicasLua).
var acquireScript = redis.NewScript(nowMS + replicasLua + `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local r, complete = countReplicas(KEYS[2], KEYS[3], ARGV[4], tonumber(ARGV[5]), now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, r, complete, now}
end
return {0, r, complete, now}
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

// The shared breaker's keys: KEYS[1] state (HASH gen, until: the open
// period's identity and its end in Redis ms; absent: closed), KEYS[2]
// trips (ZSET replica -> time of its trip), KEYS[3] probe (the replica
// holding the probe lease, with its expiry). ARGV[1] is always the
// replica. An open period's identity (gen) is a random number the replica
// that opens it draws, so that a period opened after Redis lost its data
// is never taken for one opened before. Messages on the channel are
// "open <gen> <remaining ms>" and "closed <gen>".

// tripScript records a trip and opens the breaker if a quorum of replicas
// tripped within the window; if it is open or half-open already, it
// records nothing and returns the current period.
//
//	ARGV replica, window ms, quorum, open ms, grace ms, channel, new gen
//
// It returns {gen, remaining ms} of the open period (remaining <= 0:
// half-open), or {0, 0} if the breaker stays closed.
var tripScript = redis.NewScript(nowMS + `
local st = redis.call('HMGET', KEYS[1], 'gen', 'until')
if st[1] then return {tonumber(st[1]), tonumber(st[2]) - now} end
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if redis.call('ZCARD', KEYS[2]) < tonumber(ARGV[3]) then return {0, 0} end
redis.call('HSET', KEYS[1], 'gen', ARGV[7], 'until', now + tonumber(ARGV[4]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]) + tonumber(ARGV[5]))
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('PUBLISH', ARGV[6], 'open ' .. ARGV[7] .. ' ' .. ARGV[4])
return {tonumber(ARGV[7]), tonumber(ARGV[4])}
`)

// pollScript reads the breaker's state: {gen, remaining ms} or {0, 0}.
var pollScript = redis.NewScript(nowMS + `
local st = redis.call('HMGET', KEYS[1], 'gen', 'until')
if not st[1] then return {0, 0} end
return {tonumber(st[1]), tonumber(st[2]) - now}
`)

// probeScript takes or renews the probe lease of open period gen, once its
// open time has passed.
//
//	ARGV replica, gen, probe lease ms
//
// It returns 1 if the replica holds the lease, else 0.
var probeScript = redis.NewScript(nowMS + `
local st = redis.call('HMGET', KEYS[1], 'gen', 'until')
if not st[1] or st[1] ~= ARGV[2] or tonumber(st[2]) > now then return 0 end
local cur = redis.call('GET', KEYS[3])
if cur and cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3])
return 1
`)

// verdictScript applies the prober's verdict on open period gen: closed
// everywhere, or open again for open ms. Anyone but the lease holder of
// that period is ignored.
//
//	ARGV replica, gen, ok (1 or 0), open ms, grace ms, channel, new gen
//
// It returns {-1, 0} if ignored, {0, 0} if closed, or the new period's
// {gen, remaining ms}.
var verdictScript = redis.NewScript(nowMS + `
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return {-1, 0} end
if redis.call('HGET', KEYS[1], 'gen') ~= ARGV[2] then return {-1, 0} end
redis.call('DEL', KEYS[3], KEYS[2])
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[6], 'closed ' .. ARGV[2])
  return {0, 0}
end
redis.call('HSET', KEYS[1], 'gen', ARGV[7], 'until', now + tonumber(ARGV[4]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]) + tonumber(ARGV[5]))
redis.call('PUBLISH', ARGV[6], 'open ' .. ARGV[7] .. ' ' .. ARGV[4])
return {tonumber(ARGV[7]), tonumber(ARGV[4])}
`)

// dropProbeScript gives back the probe lease if the replica holds it.
//
//	ARGV replica
//
// It returns 1 if it did, else 0.
var dropProbeScript = redis.NewScript(`
if redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
  return 1
end
return 0
`)

// quotaScript admits one attempt of a Quota (GCRA: each bucket is the
// theoretical arrival time, TAT, of its next unit), after applying what the
// replica owes and the hold it asks for. Times are in Redis microseconds.
//
//	KEYS[1] requests TAT, KEYS[2] tokens TAT, KEYS[3] hold's end,
//	KEYS[4] replicas, KEYS[5] since (see replicasLua)
//	ARGV[1] us per request (0: no request quota), ARGV[2] its burst in us,
//	ARGV[3] us per token (0: no token quota), ARGV[4] its burst in us,
//	ARGV[5] cost in tokens, ARGV[6] the longest wait in us (-1: admit
//	nothing, only apply what is owed), ARGV[7] requests owed, ARGV[8]
//	tokens owed (either may be negative: a refund), ARGV[9] horizon in us,
//	ARGV[10] a hold to set in us (0: none), ARGV[11] replica, ARGV[12]
//	replica TTL ms, ARGV[13] how long ago the first unit owed was taken,
//	in us
//
// What is owed is charged as if from ARGV[13] ago, when it began to be
// owed: the units a fallback admitted while Redis was away were spread
// over that time, and must not be charged as if taken all at once now.
// A TAT or hold that is not a number (or not a string) counts as none, and none lies further
// ahead than its burst plus the horizon: such a value is written back
// within bounds, with its expiry. An attempt that would wait longer
// than ARGV[6] is charged nothing. It returns {1 if admitted else 0, the
// wait in us, 1 if the hold made the wait else 0, live replicas, 1 if the
// count is complete else 0, now in ms}.
var quotaScript = redis.NewScript(replicasLua + `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local horizon = tonumber(ARGV[9])
local function put(key, v)
  if v <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, string.format('%.0f', v), 'PX', math.ceil((v - now) / 1000) + 1)
  end
end
local function read(key, tau, low)
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' then
    redis.call('DEL', key)
    raw = false
  end
  local v = tonumber(raw)
  if not v or v ~= v then v = low end
  local c = math.min(math.max(v, low), now + tau + horizon)
  if raw and c ~= v then put(key, c) end
  return c
end
local span = tonumber(ARGV[13])
local function bucket(key, tau, owed, per)
  local v = read(key, tau, now - span) + owed * per
  return math.min(math.max(v, now), now + tau + horizon)
end
local hold = read(KEYS[3], 0, now)
local sethold = tonumber(ARGV[10])
if sethold > 0 and now + sethold > hold then
  hold = math.min(now + sethold, now + horizon)
  put(KEYS[3], hold)
end
local admit = tonumber(ARGV[6]) >= 0
local holdwait, ratewait = hold - now, 0
local tr, taur, tt, taut = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local cost = tonumber(ARGV[5])
local rq, tk = now, now
if tr > 0 then
  rq = bucket(KEYS[1], taur, tonumber(ARGV[7]), tr)
  ratewait = rq + tr - now - taur
end
if tt > 0 then
  tk = bucket(KEYS[2], taut, tonumber(ARGV[8]), tt)
  ratewait = math.max(ratewait, tk + math.min(cost * tt, taut) - now - taut)
end
local wait = math.max(holdwait, ratewait, 0)
local ok = 0
if admit and wait <= tonumber(ARGV[6]) then
  ok = 1
  rq = rq + tr
  tk = math.min(tk + cost * tt, now + taut + horizon)
end
if tr > 0 then put(KEYS[1], rq) end
if tt > 0 then put(KEYS[2], tk) end
local r, complete = countReplicas(KEYS[4], KEYS[5], ARGV[11], tonumber(ARGV[12]), math.floor(now / 1000))
local byhold = 0
if holdwait >= ratewait and holdwait > 0 then byhold = 1 end
return {ok, math.floor(wait), byhold, r, complete, math.floor(now / 1000)}
`)

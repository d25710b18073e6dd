package redisstate

import (
	"sync"
	"sync/atomic"
)

// replicasLua defines countReplicas(rkey, skey, replica, ttl, now): it drops
// the lapsed replicas of the ZSET rkey, records replica as alive for ttl
// ms, and returns the live replicas and 1 if the count is complete, else
// 0. A count begun afresh (Redis lost its data, or every replica had
// lapsed; skey holds when it began) is complete once it is a replica TTL
// old: every replica alive has called since. now and ttl are in ms. A
// key of another type than these is replaced; a replica whose expiry lies
// further than ttl ahead, or a since after now, is no one's and is
// dropped.
const replicasLua = `
local function countReplicas(rkey, skey, replica, ttl, now)
  local ty = redis.call('TYPE', rkey)['ok']
  if ty ~= 'zset' and ty ~= 'none' then redis.call('DEL', rkey) end
  redis.call('ZREMRANGEBYSCORE', rkey, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', rkey, '(' .. string.format('%.0f', now + ttl), '+inf')
  local since = redis.pcall('GET', skey)
  if type(since) == 'table' then since = nil else since = tonumber(since) end
  if not since or since ~= since or since > now or redis.call('ZCARD', rkey) == 0 then since = now end
  redis.call('SET', skey, string.format('%.0f', since), 'PX', ttl)
  redis.call('ZADD', rkey, now + ttl, replica)
  redis.call('PEXPIRE', rkey, ttl)
  local complete = 0
  if now - since >= ttl then complete = 1 end
  return redis.call('ZCARD', rkey), complete
end
`

// replicaCount is the number of live replicas Redis last reported to one
// policy. The zero value is a count never reported.
type replicaCount struct {
	n  atomic.Int64 // 0: never reported
	mu sync.Mutex   // orders note
	at int64        // Redis's time of the complete count kept, in ms
}

// note records n, the live replicas Redis counted at its time at (ms).
// Answers may arrive out of order: one older than the latest complete
// answer is ignored. A complete count replaces the count kept. A count
// that is not complete (begun afresh less than a replica TTL ago) may lack
// replicas that have not called since: it can raise the count kept, not
// lower it.
func (c *replicaCount) note(n int64, complete bool, at int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case at < c.at:
	case complete:
		c.at = at
		c.n.Store(n)
	case n > c.n.Load():
		c.n.Store(n)
	}
}

// load returns the count kept, or 0 if none was reported.
func (c *replicaCount) load() int64 { return c.n.Load() }

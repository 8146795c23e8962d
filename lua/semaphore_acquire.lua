-- semaphore_acquire: take one permit of a counting semaphore.
--
-- KEYS[1]  permit set (sorted set: token -> deadline ms, +inf = no expiry)
-- KEYS[2]  capacity key (string, same slot)
-- KEYS[3]  optional grant log (list, same slot; tests only): each grant
--          appends its token
-- ARGV[1]  ownership token (random, non-empty)
-- ARGV[2]  capacity, a whole number in [1, MAX_CAPACITY]
-- ARGV[3]  ttl in whole milliseconds in [1, MAX_TTL_MS], or "none" for a
--          permit that expires only when released
--
-- Result:
--   {1, deadline, live}   granted; deadline in server ms ("inf" for none),
--                         live = permits live after the grant
--   {0, wait, live}       full; wait = ms until the earliest live permit
--                         expires (-1 when every live permit has no expiry).
--                         The ZCOUNT registers the set for client tracking.
--   {-1, stored, live}    capacity mismatch: live permits were taken with
--                         the capacity stored (a string); nothing written
-- Errors (nothing written):
--   WRONGTYPE ...           a key holds a value of another type
--   COORDHOST_BADARG <why>  an argument out of range (see args.lua), or two
--                           KEYS that are the same key
--
-- Expired permits are pruned, and the keys' expiry set to the longest live
-- permit (see sem_expire), only on a grant. Minimum server: Redis 6.2
-- (tested on 7.0). Not idempotent: never retry.

distinct_keys()
local zset, capkey = KEYS[1], KEYS[2]
local token = token_arg(1, 'token')
local cap = sem_capacity_arg(2)
local forever = ARGV[3] == 'none'
local ms = 0
if not forever then
  ms = ms_arg(3, 'ttl', 1)
end
local now = sem_now()
local live = sem_live(zset, now)
local stored = redis.call('GET', capkey)
if KEYS[3] then
  redis.call('LLEN', KEYS[3]) -- WRONGTYPE before any write
end
if live > 0 and stored and stored ~= ARGV[2] then
  return {-1, stored, live}
end
if live >= cap then
  local first = redis.call('ZRANGEBYSCORE', zset, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local wait = -1
  if first[2] and first[2] ~= 'inf' then
    wait = tonumber(first[2]) - now
  end
  return {0, wait, live}
end
-- Add before pruning, so pruning never empties (deletes) the set that
-- the script touches next: on a cluster node whose slot is MIGRATING, a
-- command on a key the node no longer has fails the script after the
-- writes before it ("non local key"). The new permit is live, so pruning
-- keeps it.
local deadline = 'inf'
if forever then
  redis.call('ZADD', zset, '+inf', token)
else
  deadline = tostring(now + ms)
  redis.call('ZADD', zset, now + ms, token)
end
redis.call('ZREMRANGEBYSCORE', zset, '-inf', now)
redis.call('SET', capkey, ARGV[2])
sem_expire(zset, capkey)
if KEYS[3] then
  redis.call('RPUSH', KEYS[3], token)
end
return {1, deadline, live + 1}

-- semaphore_release: owner-checked return of one permit, announced on the
-- semaphore's release channel.
--
-- KEYS[1]  permit set
-- KEYS[2]  capacity key (same slot)
-- ARGV[1]  ownership token
-- ARGV[2]  release channel (PUBLISH via pcall: fire and forget)
--
-- Result: 1 released (the permit was live);
--         0 absent or already expired (an expired member is removed);
--        -1 absent while the semaphore is full of other live permits: the
--           permit's place went to another owner (nothing deleted).
-- Errors (nothing written): WRONGTYPE when a key holds another type;
-- COORDHOST_BADARG for an empty token.
--
-- Minimum server: Redis 6.2. Idempotent for its owner.

if ARGV[1] == nil or ARGV[1] == '' then
  return redis.error_reply('COORDHOST_BADARG token is empty')
end
local zset, capkey = KEYS[1], KEYS[2]
local now = sem_now()
local score = redis.call('ZSCORE', zset, ARGV[1])
if not score then
  local live = sem_live(zset, now)
  local cap = tonumber(redis.call('GET', capkey) or '')
  if cap and live >= cap then
    return -1
  end
  return 0
end
local expired = score ~= 'inf' and tonumber(score) <= now
-- Never touch the set after a command may have emptied (deleted) it: on a
-- cluster node whose slot is MIGRATING, any command on a key the node no
-- longer has fails the script ("non local key") after the writes before
-- it. So count first, then delete both keys or remove and re-expire.
local left = sem_live(zset, now)
if not expired then
  left = left - 1
end
if left == 0 then
  redis.call('DEL', zset, capkey)
else
  redis.call('ZREM', zset, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', zset, '-inf', now)
  sem_expire(zset, capkey)
end
if expired then
  return 0
end
redis.pcall('PUBLISH', ARGV[2], '')
return 1

-- semaphore_renew: owner-checked new deadline for one live permit.
--
-- KEYS[1]  permit set
-- KEYS[2]  capacity key (same slot)
-- ARGV[1]  ownership token
-- ARGV[2]  new ttl in whole milliseconds in [1, MAX_TTL_MS]
--
-- Result: 1 renewed; 0 not owned (absent or expired).
-- Errors (nothing written): WRONGTYPE; COORDHOST_BADARG (see args.lua).
--
-- Minimum server: Redis 6.2. Idempotent for its owner.

local zset, capkey = KEYS[1], KEYS[2]
token_arg(1, 'token')
local ms = ms_arg(2, 'ttl', 1)
local now = sem_now()
local score = redis.call('ZSCORE', zset, ARGV[1])
if not score or (score ~= 'inf' and tonumber(score) <= now) then
  return 0
end
redis.call('ZADD', zset, 'XX', now + ms, ARGV[1])
redis.call('ZREMRANGEBYSCORE', zset, '-inf', now)
sem_expire(zset, capkey)
return 1

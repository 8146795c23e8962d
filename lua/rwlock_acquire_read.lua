-- rwlock_acquire_read: take a shared read lease (see rwlock_lib.lua for the
-- keys' layout).
--
-- KEYS[1]  holders: sorted set of owner members scored by deadline
-- KEYS[2]  waiting writers: hash (same slot)
-- KEYS[3]  grant log (only when ARGV[3] == "1"): a list that gets the member
--          on every grant. Used by the fault-history tests to settle
--          acquisitions whose reply was lost; never by production code.
-- ARGV[1]  ownership token (random, non-empty)
-- ARGV[2]  lease in whole milliseconds (> 0)
-- ARGV[3]  "1" when the last key is a grant log (optional)
--
-- Expired holders and dead waiting-writer entries are pruned first. A
-- reader is refused while a live writer holds, or while a live waiting
-- writer's entry says readers are held off (now >= arrival + bound).
--
-- Result:
--   {1, now}                 granted: "r:<token>" added with deadline
--                            now + lease; the key expires at its latest
--                            deadline. now is the server time (ms).
--   {0, wait_ms, reason}     refused. reason 1: a writer holds, wait_ms is
--                            its remaining lease; reason 3: waiting writers
--                            hold readers off, wait_ms is the time until the
--                            last of those entries expires unrefreshed.
-- The reads of both keys also register them for client tracking on the
-- calling connection.
-- Errors (nothing written):
--   WRONGTYPE ...           a key holds a value of another type
--   COORDHOST_BADARG <why>  an empty token, a lease outside [1, MAX_TTL_MS]
--                           (see args.lua), keys that alias each other
--
-- Minimum server: Redis 5 (TIME before writes, effects replication).
-- Not idempotent: never retry.

local holders, writers = KEYS[1], KEYS[2]
local token = token_arg(1, 'token')
local ms = ms_arg(2, 'lease', 1)
if #KEYS < 2 then
  bad_arg('the waiting-writers key is missing')
end
distinct_keys()
local log = grant_log(3, 3)
check_types(holders, writers)
local now = now_ms()

local first = {}
local held = live_holders(holders, now) > 0
if held then
  prune_holders(holders, now)
  first = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')
end
if first[1] and string.sub(first[1], 1, 2) == 'w:' then
  return {0, tonumber(first[2]) - now, 1}
end

local blocked_until = nil
local live, dead = live_writers(writers, now)
drop_writers(writers, dead)
for _, w in ipairs(live) do
  if w.bound ~= UNBOUNDED and now >= w.arrival + w.bound then
    if not blocked_until or w.deadline > blocked_until then
      blocked_until = w.deadline
    end
  end
end
if blocked_until then
  return {0, blocked_until - now, 3}
end

local member = 'r:' .. token
redis.call('ZADD', holders, now + ms, member)
if not held then
  prune_holders(holders, now) -- pruned above otherwise
end
expire_at_latest(holders)
if log then
  redis.call('RPUSH', log, member)
end
return {1, now}

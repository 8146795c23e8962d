-- latch_set: start a countdown-latch generation (create), or replace the
-- current one (reset: create or replace).
--
-- KEYS[1]  latch key (see latch_lib.lua for the hash)
-- ARGV[1]  "create" (only where no latch is) or "reset" (create or replace)
-- ARGV[2]  the new generation's token (random, non-empty)
-- ARGV[3]  count: a canonical decimal in [0, MAX_COUNT]
-- ARGV[4]  the key's lifetime from now in whole milliseconds, in
--          [1, MAX_TTL_MS]; "0" for no expiry
-- ARGV[5]  channel; PUBLISHed when a generation is replaced, so its waiters
--          wake (pcall: a missing pub/sub permission never fails the reset)
--
-- Result:
--   {1, count}       KEYS[1] now holds generation ARGV[2] with count.
--   {0, gen, count}  create only: a latch is there (generation gen, count
--                    count, 0 when completed); nothing written.
-- A reset that replaces a generation whose count is 0 records it in done;
-- otherwise done carries over.
-- Errors (nothing written): WRONGTYPE when the key holds another type,
-- COORDHOST_NOTLATCH when it holds a hash that is not a latch,
-- COORDHOST_BADARG for a bad mode, an empty token, a non-canonical or too
-- large count, a ttl out of range.
--
-- Minimum server: Redis 4.0 (HSET with several fields). Not idempotent:
-- never retry (a retry could land after another client's reset or delete
-- and apply the generation a second time).

local key = KEYS[1]
local mode = ARGV[1]
if mode ~= 'create' and mode ~= 'reset' then
  bad_arg('mode must be create or reset')
end
local gen = token_arg(2, 'generation')
local count = count_arg(3)
local ttl = expiry_arg(4)
local cur = latch_state(key)
if cur and mode == 'create' then
  return {0, cur.gen, cur.count}
end
local done = false
if cur then
  if cur.count == '0' then
    done = cur.gen
  else
    done = cur.done
  end
end
-- Replace the old generation in place (HSET, then HDEL of every other
-- field) rather than DEL then HSET: on a cluster node whose slot is
-- MIGRATING, a command on a key the node no longer has (one this script
-- just deleted) fails the script after the writes before it ("non local
-- key"), which would leave the latch deleted.
if done then
  redis.call('HSET', key, 'gen', gen, 'count', count, 'done', done)
else
  redis.call('HSET', key, 'gen', gen, 'count', count)
end
if cur then
  local stale = {}
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if f ~= 'gen' and f ~= 'count' and (f ~= 'done' or not done) then
      stale[#stale + 1] = f
    end
  end
  if #stale > 0 then
    redis.call('HDEL', key, unpack(stale))
  end
end
set_expiry(key, ttl)
if cur then
  redis.pcall('PUBLISH', ARGV[5], '')
end
return {1, count}

-- lock_acquire: owner-checked lock acquire with optional fencing counter.
--
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter key (present only when fencing; same slot as KEYS[1])
-- KEYS[n]  grant log (last key; only when ARGV[3] == "1"): a list that gets
--          "token fence" on every grant. Used by the fault-history tests to
--          settle acquisitions whose reply was lost; never by production code.
-- ARGV[1]  ownership token (random, non-empty)
-- ARGV[2]  lease in whole milliseconds (> 0)
-- ARGV[3]  "1" when the last key is a grant log (optional)
--
-- Result:
--   {1, fence}  acquired; fence is the counter value as a decimal string
--               (GET, not INCR's reply: Lua numbers are doubles), or "" without
--               fencing
--   {0, pttl}   held by someone else; pttl is the holder's remaining TTL in ms
--               (-1 when the key has no TTL). The GET here also registers the
--               key for client tracking on the calling connection.
-- Errors (nothing written):
--   WRONGTYPE ...                 the lock key holds a non-string value
--   COORDHOST_BADCOUNTER <why>    the counter is malformed, expiring or full
--   COORDHOST_BADARG <why>        an empty token or a lease outside
--                                 [1, MAX_TTL_MS] (see args.lua)
--
-- Minimum server: Redis 2.6.12 (SET NX PX). Not idempotent: never retry.

local function counter_problem(key)
  local v = redis.call('GET', key)
  if not v then
    return nil
  end
  if not string.match(v, '^[0-9]+$') or (#v > 1 and string.sub(v, 1, 1) == '0') then
    return 'counter is not a plain non-negative decimal integer'
  end
  if #v > 19 or (#v == 19 and v >= '9223372036854775807') then
    return 'counter would overflow int64'
  end
  if redis.call('PTTL', key) ~= -1 then
    return 'counter has a TTL and would reset fencing tokens'
  end
  return nil
end

token_arg(1, 'token')
ms_arg(2, 'lease', 1)
distinct_keys()

local grant_log = nil
if ARGV[3] == '1' then
  if #KEYS < 2 then
    bad_arg('a grant log needs a key of its own')
  end
  grant_log = KEYS[#KEYS]
end
local counter = nil
if #KEYS == 3 or (#KEYS == 2 and not grant_log) then
  counter = KEYS[2]
end

if counter then
  local why = counter_problem(counter)
  if why then
    return redis.error_reply('COORDHOST_BADCOUNTER ' .. why)
  end
end
if grant_log then
  redis.call('LLEN', grant_log) -- WRONGTYPE now, not after the SET
end

if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  -- GET raises WRONGTYPE for a foreign value and registers tracking.
  redis.call('GET', KEYS[1])
  return {0, redis.call('PTTL', KEYS[1])}
end

local fence = ''
if counter then
  redis.call('INCR', counter)
  fence = redis.call('GET', counter)
end
if grant_log then
  redis.call('RPUSH', grant_log, ARGV[1] .. ' ' .. fence)
end
return {1, fence}

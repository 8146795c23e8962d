-- lock_acquire: owner-checked lock acquire with optional fencing counter.
--
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter key (present only when fencing; same slot as KEYS[1])
-- ARGV[1]  ownership token (random, non-empty)
-- ARGV[2]  lease in whole milliseconds (> 0)
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

if KEYS[2] then
  local why = counter_problem(KEYS[2])
  if why then
    return redis.error_reply('COORDHOST_BADCOUNTER ' .. why)
  end
end

if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  -- GET raises WRONGTYPE for a foreign value and registers tracking.
  redis.call('GET', KEYS[1])
  return {0, redis.call('PTTL', KEYS[1])}
end

if KEYS[2] then
  redis.call('INCR', KEYS[2])
  return {1, redis.call('GET', KEYS[2])}
end
return {1, ''}

-- lock_acquire_fifo: lock acquire that grants in order of arrival.
--
-- KEYS[1]  lock key
-- KEYS[2]  queue: sorted set of waiting tokens scored by arrival
--          ((server ms - 2024-01-01) * 1024 + per-process sequence mod 1024:
--          exact in a double until the year 2300)
-- KEYS[3]  queue deadlines: sorted set of waiting tokens scored by the server
--          ms after which the waiter counts as gone
-- KEYS[4]  fencing counter key (present only when fencing)
--          All keys share one cluster slot.
-- ARGV[1]  ownership token (fresh for every attempt whose outcome was unknown)
-- ARGV[2]  lease in whole milliseconds (> 0)
-- ARGV[3]  per-process arrival sequence (0..1023)
-- ARGV[4]  waiter lease in ms: how long the queue entry lives unrefreshed;
--          0 = do not queue (a one-shot try that leaves nothing behind)
-- ARGV[5]  waiter id: the queue member, one per waiting call and kept across
--          its attempts, so an attempt whose reply was lost leaves no orphan
--          entry behind (the next attempt refreshes the same one)
--
-- Result:
--   {1, fence}      acquired (fence as in lock_acquire); the waiter left the queue
--   {0, wait_ms}    not acquired; the waiter is queued (or refreshed). wait_ms
--                   is the holder's PTTL, or, when the lock is free but an
--                   earlier waiter is first, the time until that waiter's
--                   entry expires; -1 when neither bounds the wait.
-- Errors (nothing written): WRONGTYPE, COORDHOST_BADCOUNTER <why>,
--   COORDHOST_BADARG <why> (see args.lua).
--
-- Minimum server: Redis 5 (TIME in scripts with effects replication).
-- Not idempotent: never retry.

local lock, queue, deadlines, counter = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token = token_arg(1, 'token')
ms_arg(2, 'lease', 1)
local seq = tonumber(ARGV[3])
if not string.match(ARGV[3] or '', '^[0-9]+$') or seq > 1023 then
  bad_arg('arrival sequence must be a whole number in [0, 1023]')
end
local waiter_ms = ms_arg(4, 'waiter lease', 0)
local waiter = token_arg(5, 'waiter id')
distinct_keys()

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Fail before writing on foreign values.
redis.call('GET', lock)
redis.call('ZCARD', queue)
redis.call('ZCARD', deadlines)
if counter then
  local v = redis.call('GET', counter)
  if v then
    if not string.match(v, '^[0-9]+$') or (#v > 1 and string.sub(v, 1, 1) == '0') then
      return redis.error_reply('COORDHOST_BADCOUNTER counter is not a plain non-negative decimal integer')
    end
    if #v > 19 or (#v == 19 and v >= '9223372036854775807') then
      return redis.error_reply('COORDHOST_BADCOUNTER counter would overflow int64')
    end
    if redis.call('PTTL', counter) ~= -1 then
      return redis.error_reply('COORDHOST_BADCOUNTER counter has a TTL and would reset fencing tokens')
    end
  end
end

-- Waiters that stopped refreshing their entries are gone: they do not
-- count, and leave both sets at the end. Every key is touched last by the
-- command that may empty (delete) it: on a cluster node whose slot is
-- MIGRATING, a command on a key the node no longer has fails the script
-- after the writes before it ("non local key").
local gone, is_gone, own_stale = {}, {}, false
for _, m in ipairs(redis.call('ZRANGEBYSCORE', deadlines, '-inf', now)) do
  is_gone[m] = true
  if m == waiter then
    -- Our own entry went stale: we queue again at the tail (below), by
    -- moving the entry rather than removing it.
    own_stale = true
  else
    gone[#gone + 1] = m
  end
end
local function first_waiter()
  for _, m in ipairs(redis.call('ZRANGE', queue, 0, #gone + 1)) do
    if not is_gone[m] then
      return m
    end
  end
  return nil
end
local function drop(key, extra)
  local members = {unpack(gone)}
  if extra then
    members[#members + 1] = extra
  end
  if #members > 0 then
    redis.call('ZREM', key, unpack(members))
  end
end

local first = first_waiter()
if (not first or first == waiter) and redis.call('SET', lock, token, 'NX', 'PX', ARGV[2]) then
  drop(queue, waiter)
  drop(deadlines, waiter)
  if counter then
    redis.call('INCR', counter)
    return {1, redis.call('GET', counter)}
  end
  return {1, ''}
end

if waiter_ms == 0 then
  local pttl = redis.call('PTTL', lock)
  drop(queue)
  drop(deadlines)
  return {0, pttl}
end
local arrival = (now - 1704067200000) * 1024 + seq
if own_stale then
  redis.call('ZADD', queue, arrival, waiter)
else
  redis.call('ZADD', queue, 'NX', arrival, waiter)
end
redis.call('ZADD', deadlines, now + waiter_ms, waiter)
-- Keep the queue as long as its longest-lived entry (other processes may use
-- a longer waiter lease).
for _, k in ipairs({queue, deadlines}) do
  if redis.call('PTTL', k) < waiter_ms then
    redis.call('PEXPIRE', k, waiter_ms)
  end
end

local pttl = redis.call('PTTL', lock)
local wait = pttl
if pttl == -2 then
  first = first_waiter()
  local until_gone = redis.call('ZSCORE', deadlines, first)
  wait = 0
  if until_gone then
    wait = math.max(tonumber(until_gone) - now, 0)
  end
end
-- Our own entry stays, so neither set empties here.
drop(queue)
drop(deadlines)
return {0, wait}

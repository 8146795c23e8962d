-- ratelimit_fixed: one decision of a fixed-window rate limiter.
--
-- KEYS[1]  the window's counter (string: permits consumed in the window)
-- ARGV[1..3] consume, need, limit (see ratelimit_lib.lua)
-- ARGV[4]  window in whole milliseconds in [1, MAX_TTL_MS]
--
-- Result: {granted, remaining, retry_us, reset_us, now_us} (see
-- ratelimit_lib.lua). A window starts with the first permit consumed after
-- the previous one ended and lasts ARGV[4] ms (the counter's expiry, set
-- only when it has none, as INCREX ... PX window ENX does); retry_us and
-- reset_us are the time until the counter expires.
-- Errors (nothing written):
--   WRONGTYPE ...              KEYS[1] is not a string
--   COORDHOST_WRONGKIND <why>  KEYS[1] holds something other than a count
--   COORDHOST_BADARG <why>     an argument out of range
--
-- A counter without expiry (written by something else) gets one on the
-- next grant or refusal that consumes, so a limiter can never stay shut.
-- Minimum server: Redis 6.2 (tested on 7.0). Not idempotent: never retry.

local consume, need, limit = permit_args()
local window = num(4, 'window', 1, MAX_TTL_MS)
local now = now_us()

local raw = redis.call('GET', KEYS[1])
local used = 0
if raw then
  used = counter(raw) and whole(raw, MAX_COUNT)
  if not used then
    wrong_kind('the counter holds ' .. string.format('%q', string.sub(raw, 1, 32)) .. ', not a permit count')
  end
end
local pttl = redis.call('PTTL', KEYS[1])

local function until_reset()
  if pttl == -2 then
    return 0 -- no window open: nothing consumed
  elseif pttl < 0 then
    return window * 1000
  end
  -- Redis expires a key once its time is strictly past the deadline.
  return (pttl + 1) * 1000
end

if used + need <= limit then
  if consume > 0 then
    redis.call('INCRBY', KEYS[1], consume)
    if pttl < 0 then
      redis.call('PEXPIRE', KEYS[1], window)
      pttl = window
    end
  end
  return {1, limit - used - consume, 0, until_reset(), now}
end

if consume > 0 and pttl == -1 then
  redis.call('PEXPIRE', KEYS[1], window)
  pttl = window
end
local remaining = limit - used
if remaining < 0 then remaining = 0 end
return {0, remaining, until_reset(), until_reset(), now}

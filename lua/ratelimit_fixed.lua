-- ratelimit_fixed: one decision of a fixed-window rate limiter.
--
-- KEYS[1]  the window's counter (string: permits consumed in the window)
-- ARGV[1..3] consume, need, limit (see ratelimit_lib.lua)
-- ARGV[4]  window in whole milliseconds in [1, MAX_TTL_MS]
--
-- Result: {granted, remaining, retry_us, reset_us, now_us} (see
-- ratelimit_lib.lua). A window starts with the first permit consumed after
-- the previous one ended and lasts ARGV[4] ms to ARGV[4] + 1 ms (the
-- counter's expiry, set only when it has none, as INCREX ... PX window ENX
-- does); retry_us and reset_us are the time until the counter expires, by
-- TIME.
-- Errors (nothing written):
--   WRONGTYPE ...              KEYS[1] is not a string
--   COORDHOST_WRONGKIND <why>  KEYS[1] holds something other than a count
--   COORDHOST_BADARG <why>     an argument out of range
--
-- A counter without expiry (written by something else) gets one on the
-- next grant or refusal that consumes, so a limiter can never stay shut.
-- Minimum server: Redis 7.0 (PEXPIRETIME). Not idempotent: never retry.

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
-- The window ends at the counter's expiry time (PEXPIRETIME, whole ms),
-- decided on TIME's clock. Redis deletes an expired key on access once its
-- command clock is past the expiry, but its active expiry cycle (Redis 8)
-- may delete it anywhere within that millisecond, and on 7.0 PTTL reads a
-- clock newer than TIME's: counting the window as over from its first
-- microsecond by TIME keeps the decision, now_us and retry_us on one
-- clock, whichever way the key goes.
local at = -2 -- the counter's expiry in ms; -1: none; -2: no counter, or its window is over
if raw then
  at = redis.call('PEXPIRETIME', KEYS[1])
  if at >= 0 and now >= at * 1000 then
    used, at = 0, -2
  end
end

-- until_reset: microseconds until the window ends (0: none is open).
local function until_reset()
  if at == -2 then
    return 0
  elseif at == -1 then
    return window * 1000
  end
  return at * 1000 - now
end

-- new_end returns the expiry of a window opening now, in whole ms: at
-- least window ms from now.
local function new_end()
  return math.floor(now / 1000) + window + 1
end

if used + need <= limit then
  if consume > 0 then
    if at == -2 then
      at = new_end()
      redis.call('SET', KEYS[1], int(consume), 'PXAT', int(at))
    else
      redis.call('INCRBY', KEYS[1], consume)
      if at == -1 then
        at = new_end()
        redis.call('PEXPIREAT', KEYS[1], int(at))
      end
    end
  end
  return {1, limit - used - consume, 0, until_reset(), now}
end

if consume > 0 and at == -1 then
  at = new_end()
  redis.call('PEXPIREAT', KEYS[1], int(at))
end
local remaining = limit - used
if remaining < 0 then remaining = 0 end
return {0, remaining, until_reset(), until_reset(), now}

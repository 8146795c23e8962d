-- ratelimit_lib: helpers the rate-limit scripts share; lua/embed.go puts
-- it in front of each of them.
--
-- Every rate-limit script takes the same first three arguments:
--   ARGV[1]  permits to consume, a whole number in [0, MAX_COUNT]
--   ARGV[2]  permits needed for a grant, in [max(1, consume), limit]
--            (consume 0 with need k asks "would k be granted?" and writes
--            nothing: a peek)
--   ARGV[3]  the limit, in [1, MAX_COUNT]
-- and answers {granted, remaining, retry_us, reset_us, now_us}:
--   granted    1 or 0
--   remaining  permits available after the decision (never below 0)
--   retry_us   when refused: microseconds until `need` permits are
--              available if nobody else takes any; 0 when granted
--   reset_us   microseconds until more permits become available (0 when
--              the limiter is at its limit of available permits)
--   now_us     the server TIME the decision was made at, in microseconds
--
-- Times are microseconds of server TIME: exact in a Lua double for the
-- next 200 years, and fine enough that "no window of length W holds more
-- than the limit" holds without rounding slack. Keys expire through
-- PEXPIRE in whole milliseconds, rounded up.
--
-- MAX_COUNT (10^15) keeps every sum of counts exact in a Lua double
-- (primitives/ratelimit.MaxLimit; a test keeps the two equal).

local MAX_COUNT = 1000000000000000

-- MAX_TTL_MS is args.lua's (the rate-limit scripts do without args.lua:
-- they run on every request, and its checks cost more than these).
local MAX_TTL_MS = 3153600000000

local function bad_arg(why)
  error({err = 'COORDHOST_BADARG ' .. why})
end

-- num returns ARGV[i] as a whole number in [min, max]. tonumber also
-- reads "1e3" or "0x10" as whole numbers: harmless, since the Go side
-- sends decimal digits and these checks only keep a bad caller from
-- writing nonsense.
local function num(i, name, min, max)
  local n = tonumber(ARGV[i])
  if not n or n ~= n or n < min or n > max or n % 1 ~= 0 then
    bad_arg(name .. ' ' .. tostring(ARGV[i]) .. ' is not a whole number in [' .. min .. ', ' .. max .. ']')
  end
  return n
end

-- permit_args checks and returns ARGV[1..3]: consume, need, limit.
local function permit_args()
  local consume = num(1, 'permits', 0, MAX_COUNT)
  local limit = num(3, 'limit', 1, MAX_COUNT)
  local need = num(2, 'needed permits', math.max(consume, 1), limit)
  return consume, need, limit
end

-- now_us returns the server's TIME in microseconds.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- wrong_kind raises for a key that holds state this limiter did not write
-- (another algorithm's, or a foreign value of the same Redis type).
local function wrong_kind(why)
  error({err = 'COORDHOST_WRONGKIND ' .. why})
end

-- MAX_US bounds stored times (microseconds): the largest whole number a
-- Lua double holds exactly.
local MAX_US = 9007199254740991

-- whole returns a stored value as a whole number in [0, max], else nil.
local function whole(s, max)
  local n = tonumber(s)
  if not n or n ~= n or n < 0 or n > max or n % 1 ~= 0 then
    return nil
  end
  return n
end

-- counter reports whether s is a count INCRBY and HINCRBY accept as it is
-- (plain decimal digits, no leading zero): checked before a script adds to
-- a stored count, so that the add cannot fail after another write.
local function counter(s)
  return s == '0' or string.match(s, '^[1-9][0-9]*$') ~= nil
end

-- expire_at sets KEYS[1] to expire at end_us (server microseconds), as
-- an absolute time rounded up to whole milliseconds: Redis 8 may delete a
-- key anywhere within its expiry's millisecond, so the expiry must not
-- begin before end_us (a relative PEXPIRE, counted from a clock a little
-- behind TIME's, could).
local function expire_at(end_us)
  redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', math.ceil(end_us / 1000)))
end

-- int formats a whole number without an exponent (tostring would write
-- 1.7e+15).
local function int(n)
  return string.format('%.0f', n)
end

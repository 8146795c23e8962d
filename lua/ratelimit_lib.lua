-- ratelimit_lib: helpers the rate-limit scripts share, after args.lua.
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

-- count_arg returns ARGV[i] as a whole number in [min, MAX_COUNT].
local function count_arg(i, name, min)
  local s = ARGV[i]
  if type(s) ~= 'string' or not string.match(s, '^[0-9]+$') or #s > 16 then
    bad_arg(name .. ' must be a whole number')
  end
  local n = tonumber(s)
  if n < min or n > MAX_COUNT then
    bad_arg(name .. ' ' .. s .. ' is outside [' .. min .. ', ' .. MAX_COUNT .. ']')
  end
  return n
end

-- permit_args checks and returns ARGV[1..3]: consume, need, limit.
local function permit_args()
  local consume = count_arg(1, 'permits', 0)
  local need = count_arg(2, 'needed permits', 1)
  local limit = count_arg(3, 'limit', 1)
  if need < consume or need > limit then
    bad_arg('needed permits ' .. need .. ' must be in [permits ' .. consume .. ', limit ' .. limit .. ']')
  end
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

-- whole returns s as a whole number >= 0 when it is one, else nil.
local function whole(s)
  if type(s) ~= 'string' or not string.match(s, '^[0-9]+$') or #s > 16 then
    return nil
  end
  return tonumber(s)
end

-- expire_in sets KEYS[1] to expire us microseconds from now (at least
-- 1 ms, rounded up to whole milliseconds so it never expires early).
local function expire_in(us)
  local ms = math.ceil(us / 1000)
  if ms < 1 then ms = 1 end
  redis.call('PEXPIRE', KEYS[1], ms)
end

-- int formats a whole number without an exponent (tostring would write
-- 1.7e+15).
local function int(n)
  return string.format('%.0f', n)
end

-- args: argument checks shared by every script. lua/embed.go puts this in
-- front of each script's source, so every script validates its arguments
-- with these before its first write: a Lua script is not a transaction, and
-- an error after a write (HSET, then a failing HPEXPIRE) would leave it.
--
-- Each check raises an error reply "COORDHOST_BADARG <what is wrong>".
--
-- MAX_TTL_MS is the longest lease a script accepts, in milliseconds: 100
-- years (handle.MaxTTL in Go; a test keeps the two equal). Far below what
-- Redis' key expiry (int64 ms) and hash-field expiry (2^48 ms since the
-- epoch) can hold, and exact in a Lua double.

local MAX_TTL_MS = 3153600000000

local function bad_arg(why)
  error({err = 'COORDHOST_BADARG ' .. why})
end

-- ms_arg returns ARGV[i] as a whole number of milliseconds in
-- [min_ms, MAX_TTL_MS]; name says what it is in the error.
local function ms_arg(i, name, min_ms)
  local s = ARGV[i]
  if type(s) ~= 'string' or not string.match(s, '^[0-9]+$') or #s > 13 then
    bad_arg(name .. ' must be a whole number of milliseconds')
  end
  local n = tonumber(s)
  if n < min_ms or n > MAX_TTL_MS then
    bad_arg(name .. ' ' .. s .. 'ms is outside [' .. min_ms .. ', ' .. MAX_TTL_MS .. ']')
  end
  return n
end

-- distinct_keys raises unless every key of KEYS is a different key: a
-- script that writes one key and then reads another as a different type
-- would fail after its first write if the two were one.
local function distinct_keys()
  local seen = {}
  for i = 1, #KEYS do
    if seen[KEYS[i]] then
      bad_arg('KEYS[' .. seen[KEYS[i]] .. '] and KEYS[' .. i .. '] are the same key')
    end
    seen[KEYS[i]] = i
  end
end

-- token_arg returns ARGV[i] when it is a non-empty string.
local function token_arg(i, name)
  local s = ARGV[i]
  if type(s) ~= 'string' or s == '' then
    bad_arg(name .. ' is empty')
  end
  return s
end


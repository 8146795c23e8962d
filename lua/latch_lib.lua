-- latch_lib: what the countdown-latch scripts share. lua/embed.go puts it
-- after args.lua in front of each latch script.
--
-- A latch is one hash:
--   gen    the current generation's token (random, non-empty)
--   count  its remaining count, a canonical decimal in [0, MAX_COUNT]
--   done   present once a reset replaced a generation that had reached
--          zero: that generation's token (the most recent such one), so
--          its late waiters still learn it completed
--
-- MAX_COUNT is the largest count a latch accepts (latch.MaxCount in Go; a
-- test keeps the two equal): 2^53 - 1, the largest integer a Lua number
-- holds exactly, so HINCRBY's reply converted to Lua stays exact.

local MAX_COUNT = 9007199254740991

-- count_arg returns ARGV[i] as a count in [0, MAX_COUNT]; it must be a
-- canonical decimal (no sign, no leading zero), as the hash stores it.
local function count_arg(i)
  local s = ARGV[i]
  if type(s) ~= 'string' or not (s == '0' or string.match(s, '^[1-9][0-9]*$')) or #s > 16 then
    bad_arg('count must be a canonical decimal integer')
  end
  if tonumber(s) > MAX_COUNT then
    bad_arg('count ' .. s .. ' is above ' .. MAX_COUNT)
  end
  return s
end

-- expiry_arg returns ARGV[i] as a key lifetime in milliseconds: 0 means no
-- expiry, else [1, MAX_TTL_MS] (args.lua).
local function expiry_arg(i)
  if ARGV[i] == '0' then
    return 0
  end
  return ms_arg(i, 'ttl', 1)
end

local function not_a_latch(why)
  error({err = 'COORDHOST_NOTLATCH the key holds a hash that is not a coordhost latch (' .. why .. ')'})
end

-- latch_state reads the latch at key: nil when the key is absent, else
-- {gen = ..., count = ..., done = ... or false}. A key of another type
-- raises Redis' WRONGTYPE, a hash that is not a well-formed latch
-- "COORDHOST_NOTLATCH <why>", both before anything is written.
local function latch_state(key)
  local v = redis.call('HMGET', key, 'gen', 'count', 'done')
  if not v[1] and not v[2] then
    if redis.call('EXISTS', key) == 1 then
      not_a_latch('no gen and count fields')
    end
    return nil
  end
  local gen, count = v[1], v[2]
  if not gen or gen == '' then
    not_a_latch('no generation')
  end
  if not count or not (count == '0' or string.match(count, '^[1-9][0-9]*$')) or #count > 16 or tonumber(count) > MAX_COUNT then
    not_a_latch('malformed count')
  end
  return {gen = gen, count = count, done = v[3] or false}
end

-- set_expiry gives key the lifetime ttl (ms; 0 means none) from now.
local function set_expiry(key, ttl)
  if ttl > 0 then
    redis.call('PEXPIRE', key, ttl)
  else
    redis.call('PERSIST', key)
  end
end

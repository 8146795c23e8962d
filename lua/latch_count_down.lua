-- latch_count_down: decrement one generation's count, never below zero.
--
-- KEYS[1]  latch key (see latch_lib.lua)
-- ARGV[1]  the generation's token
-- ARGV[2]  the key's lifetime from now in whole milliseconds, in
--          [1, MAX_TTL_MS]; "0" for no expiry (every change sets it)
-- ARGV[3]  channel; PUBLISHed when the count reaches zero (pcall)
--
-- Result: the remaining count after this count-down (>= 0);
--         -1 the generation is not current (replaced, deleted or
--            expired): nothing written;
--         -2 the generation is complete (count 0): nothing written.
-- Errors (nothing written): WRONGTYPE when the key holds another type,
-- COORDHOST_NOTLATCH when it holds a hash that is not a latch,
-- COORDHOST_BADARG for an empty token or a ttl out of range.
--
-- Minimum server: Redis 2.6. Not idempotent: never retry.

local key = KEYS[1]
local gen = token_arg(1, 'generation')
local ttl = expiry_arg(2)
local cur = latch_state(key)
if not cur or cur.gen ~= gen then
  return -1
end
if cur.count == '0' then
  return -2
end
local n = redis.call('HINCRBY', key, 'count', -1)
set_expiry(key, ttl)
if n == 0 then
  redis.pcall('PUBLISH', ARGV[3], '')
end
return n

-- latch_delete: delete the latch if it still holds one generation, and wake
-- its waiters.
--
-- KEYS[1]  latch key (see latch_lib.lua)
-- ARGV[1]  the generation's token
-- ARGV[2]  channel; PUBLISHed after a delete (pcall)
--
-- Result: 1 deleted; 0 the generation is not current (nothing written).
-- Errors (nothing written): WRONGTYPE when the key holds another type,
-- COORDHOST_NOTLATCH when it holds a hash that is not a latch,
-- COORDHOST_BADARG for an empty token.
--
-- Minimum server: Redis 2.6. Never retried: a retry after a lost reply
-- would answer 0 for a delete that happened.

local key = KEYS[1]
local gen = token_arg(1, 'generation')
local cur = latch_state(key)
if not cur or cur.gen ~= gen then
  return 0
end
redis.call('DEL', key)
redis.pcall('PUBLISH', ARGV[2], '')
return 1

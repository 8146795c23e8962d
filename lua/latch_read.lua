-- latch_read: the latch's current state, in one atomic read. Read on the
-- wait engine's tracking connection, it also registers the key there.
--
-- KEYS[1]  latch key (see latch_lib.lua)
--
-- Result: {gen, count, done, pttl}: the current generation's token and
--         count, the last replaced generation that had completed ("" for
--         none) and the key's PTTL (-1: no expiry). {"", "", "", -2} when
--         the key is absent.
-- Errors: WRONGTYPE when the key holds another type, COORDHOST_NOTLATCH
-- when it holds a hash that is not a latch. Writes nothing.
--
-- Minimum server: Redis 2.6. Read-only: safe to retry.

local key = KEYS[1]
local cur = latch_state(key)
if not cur then
  return {'', '', '', -2}
end
return {cur.gen, cur.count, cur.done or '', redis.call('PTTL', key)}

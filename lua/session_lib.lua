-- session_lib: helpers of the session scripts (host's SessionService),
-- after args.lua. A session is a hash with a TTL:
--
--   ttl   the session's TTL in ms (every renewal sets the key's TTL to it)
--   rod   "1" when it ends as soon as its KeepAlive stream breaks, else "0"
--   tok   the label of the API token that created it ("" without auth)
--   ka    the id of the KeepAlive stream that renewed it last (absent
--         before one did)
--   g:<ownership token>  the grant id of a grant attached to the session
--
-- The answer of create, renew and get is
--   {ttl ms, rod, now seconds, now microseconds, PTTL ms, grant id...}
-- with the grant ids only where the script says so. now is the server's
-- time, so every daemon reports expiries on the clock that expires the
-- key: PEXPIRETIME less PTTL (Redis 7.0+), the very millisecond PTTL
-- counts from, so now + PTTL is the key's expiry itself and every answer
-- for one expiry names the same instant; TIME on older servers, which
-- can be a millisecond later.

-- session_answer builds the answer for the session at key.
local function session_answer(key, ttl, rod, with_grants)
  local pttl = redis.call('PTTL', key)
  local s, us
  local ok, at = pcall(redis.call, 'PEXPIRETIME', key)
  if ok and type(at) == 'number' and at > 0 then
    local now = at - pttl
    s, us = math.floor(now / 1000), (now % 1000) * 1000
  else
    local t = redis.call('TIME')
    s, us = t[1], t[2]
  end
  local out = {ttl, rod, s, us, pttl}
  if with_grants then
    local all = redis.call('HGETALL', key)
    for i = 1, #all, 2 do
      if string.sub(all[i], 1, 2) == 'g:' then
        out[#out + 1] = all[i + 1]
      end
    end
  end
  return out
end

-- session_check_owner raises COORDHOST_NOTOWNER unless caller is the label
-- of the token that created the session (tok).
local function session_check_owner(tok, caller)
  if (tok or '') ~= caller then
    error({err = 'COORDHOST_NOTOWNER the session belongs to another token'})
  end
end

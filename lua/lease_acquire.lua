-- lease_acquire: take one field of a hash as a lease with its own expiry.
--
-- KEYS[1]  hash key
-- ARGV[1]  field
-- ARGV[2]  ownership token (random, non-empty)
-- ARGV[3]  lease in whole milliseconds (> 0)
--
-- Result:
--   {1, ""}     acquired: field = token, HPEXPIRE ms on that field only
--   {0, pttl}   held; pttl is the field's HPTTL in ms (-1: no expiry). The
--               HGET also registers the hash for client tracking.
-- Errors (nothing written):
--   WRONGTYPE ...           the key holds a non-hash value
--   COORDHOST_KEYTTL <why>  the hash has a key-level TTL, which would end
--                           every field lease at once
--   COORDHOST_UNSUPPORTED <why>  the server lacks hash-field expiry
--   COORDHOST_BADARG <why>  an empty field or token, or a lease outside
--                           [1, MAX_TTL_MS] (see args.lua): checked first, so
--                           HSET never runs without its HPEXPIRE
--
-- Minimum server: Redis 7.4 (HPEXPIRE, HPTTL). Not idempotent: never retry.

local hash = KEYS[1]
local field = token_arg(1, 'field')
token_arg(2, 'token')
ms_arg(3, 'lease', 1)
local current = redis.call('HGET', hash, field)
if redis.call('PTTL', hash) >= 0 then
  return redis.error_reply('COORDHOST_KEYTTL hash key has a key-level TTL; field leases need a hash without one')
end
-- HPTTL answers for the held field, and proves, before the first write,
-- that the server has field expiry: a server without it (after a failover
-- or a downgrade the client's probe has not seen yet) would run HSET and
-- then fail on HPEXPIRE, leaving a field that never expires.
local pttl = redis.pcall('HPTTL', hash, 'FIELDS', 1, field)
if type(pttl) == 'table' and pttl.err then
  return redis.error_reply('COORDHOST_UNSUPPORTED the server has no hash-field expiry (HPTTL: ' .. pttl.err .. ')')
end
if current then
  return {0, pttl[1]}
end
redis.call('HSET', hash, field, ARGV[2])
redis.call('HPEXPIRE', hash, ARGV[3], 'FIELDS', 1, field)
return {1, ''}

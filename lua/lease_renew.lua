-- lease_renew: owner-checked new expiry for one hash field.
--
-- KEYS[1]  hash key
-- ARGV[1]  field
-- ARGV[2]  ownership token
-- ARGV[3]  new lease in whole milliseconds (> 0)
--
-- Result: 1 renewed; 0 not owned (field absent or another owner's).
-- Errors (nothing written):
--   WRONGTYPE ...           the key holds a non-hash value
--   COORDHOST_KEYTTL <why>  the hash got a key-level TTL after the grant: the
--                           lease would end with the hash, whatever its field
--                           expiry says, so the renewal fails closed
--   COORDHOST_BADARG <why>  an empty field or token, or a lease outside
--                           [1, MAX_TTL_MS] (see args.lua)
--
-- Minimum server: Redis 7.4 (HPEXPIRE). Idempotent for its owner.

token_arg(1, 'field')
token_arg(2, 'token')
ms_arg(3, 'lease', 1)

if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  if redis.call('PTTL', KEYS[1]) >= 0 then
    return redis.error_reply('COORDHOST_KEYTTL the hash got a key-level TTL after the lease was granted')
  end
  redis.call('HPEXPIRE', KEYS[1], ARGV[3], 'FIELDS', 1, ARGV[1])
  return 1
end
return 0

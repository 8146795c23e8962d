-- lease_renew: owner-checked new expiry for one hash field.
--
-- KEYS[1]  hash key
-- ARGV[1]  field
-- ARGV[2]  ownership token
-- ARGV[3]  new lease in whole milliseconds (> 0)
--
-- Result: 1 renewed; 0 not owned (field absent or another owner's).
-- Errors: WRONGTYPE when the key holds a non-hash value.
--
-- Minimum server: Redis 7.4 (HPEXPIRE). Idempotent for its owner.

if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HPEXPIRE', KEYS[1], ARGV[3], 'FIELDS', 1, ARGV[1])
  return 1
end
return 0

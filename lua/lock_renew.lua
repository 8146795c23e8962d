-- lock_renew: owner-checked change of the lease to a new TTL from now.
--
-- KEYS[1]  lock key
-- ARGV[1]  ownership token
-- ARGV[2]  new lease in whole milliseconds (> 0)
--
-- Result: 1 renewed; 0 not owned (absent or another owner).
-- Errors: WRONGTYPE when the key holds a non-string value.
--
-- Minimum server: Redis 2.6. Idempotent for its owner.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0

-- lock_renew: owner-checked change of the lease to a new TTL from now.
--
-- KEYS[1]  lock key
-- ARGV[1]  ownership token
-- ARGV[2]  new lease in whole milliseconds (> 0)
--
-- Result: 1 renewed; 0 not owned (absent or another owner).
-- Errors (nothing written): WRONGTYPE when the key holds a non-string
-- value; COORDHOST_BADARG for an empty token or a lease outside
-- [1, MAX_TTL_MS] (a negative PEXPIRE would delete the key).
--
-- Minimum server: Redis 2.6. Idempotent for its owner.

token_arg(1, 'token')
ms_arg(2, 'lease', 1)

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0

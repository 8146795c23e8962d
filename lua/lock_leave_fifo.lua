-- lock_leave_fifo: a waiter leaves the arrival queue (gave up, cancelled,
-- or settling an uncertain attempt); it also releases the lock if the token
-- holds it, and announces the change so the next waiter re-attempts.
--
-- KEYS[1]  lock key
-- KEYS[2]  queue (see lock_acquire_fifo)
-- KEYS[3]  queue deadlines
-- ARGV[1]  ownership token (of the waiter's latest attempt)
-- ARGV[2]  release channel (PUBLISH via pcall, fire and forget)
-- ARGV[3]  waiter id (the queue member; see lock_acquire_fifo)
--
-- Result: 1 if the token held the lock and it was deleted, else 0.
-- Errors (nothing written): COORDHOST_BADARG for an empty token or waiter id;
-- WRONGTYPE when a key holds a value of another type (all three are read
-- before the first write).
-- Minimum server: Redis 2.6. Idempotent.

token_arg(1, 'token')
token_arg(3, 'waiter id')
distinct_keys()
-- WRONGTYPE before any write: a ZREM on the queue followed by a failing
-- ZREM on the deadlines would leave half a departure.
redis.call('GET', KEYS[1])
redis.call('ZCARD', KEYS[2])
redis.call('ZCARD', KEYS[3])

redis.call('ZREM', KEYS[2], ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[3])
local held = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  held = 1
end
redis.pcall('PUBLISH', ARGV[2], '')
return held

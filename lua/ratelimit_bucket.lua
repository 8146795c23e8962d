-- ratelimit_bucket: one decision of a token-bucket rate limiter.
--
-- KEYS[1]  the bucket (hash: tokens -> tokens left, at -> server
--          microseconds of the latest refill)
-- ARGV[1..3] consume, need, limit (the bucket's size; see
--          ratelimit_lib.lua)
-- ARGV[4]  tokens added per period, a whole number in [1, limit]
-- ARGV[5]  period in whole milliseconds in [1, MAX_TTL_MS]
--
-- Result: {granted, remaining, retry_us, reset_us, now_us} (see
-- ratelimit_lib.lua); reset_us is the time until the next refill.
-- Errors (nothing written):
--   WRONGTYPE ...              KEYS[1] is not a hash
--   COORDHOST_WRONGKIND <why>  KEYS[1] holds fields this script did not write
--   COORDHOST_BADARG <why>     an argument out of range
--
-- A missing bucket is full. Refills add ARGV[4] tokens at once per whole
-- period since `at`, and `at` advances by whole periods (not to now), so a
-- bucket under steady traffic still refills on time. The key expires when
-- the bucket would be full again. A refill time in the future (the server
-- clock went back, or a failover to a replica behind) is taken as now, so
-- refills never stall.
-- Minimum server: Redis 6.2 (tested on 7.0). Not idempotent: never retry.

local consume, need, limit = permit_args()
local per = num(4, 'tokens per period', 1, limit)
local period = num(5, 'period', 1, MAX_TTL_MS) * 1000
if math.ceil(limit / per) * period > MAX_TTL_MS * 1000 then
  bad_arg('filling an empty bucket takes longer than ' .. MAX_TTL_MS .. 'ms')
end
local now = now_us()

local h = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens, at
local moved = false -- at was in the future and is now
if not h[1] and not h[2] then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    wrong_kind('the bucket has neither tokens nor at fields')
  end
  tokens, at = limit, now
else
  tokens, at = whole(h[1], MAX_COUNT), whole(h[2], MAX_US)
  if not tokens or not at then
    wrong_kind('the bucket has unreadable tokens or at fields')
  end
  if tokens > limit then tokens = limit end
  if at > now then at, moved = now, true end
  local periods = math.floor((now - at) / period)
  if periods > 0 then
    if periods >= math.ceil((limit - tokens) / per) then
      tokens = limit
    else
      tokens = tokens + periods * per
    end
    at = at + periods * period
  end
end

local function next_refill()
  if tokens >= limit then return 0 end
  return at + period - now
end

local function store()
  redis.call('HSET', KEYS[1], 'tokens', int(tokens), 'at', int(at))
  expire_at(at + math.ceil((limit - tokens) / per) * period)
end

if tokens >= need then
  if consume > 0 then
    tokens = tokens - consume
    store()
  end
  return {1, tokens, 0, next_refill(), now}
end
-- A refused call stores nothing, except a refill time it moved back from
-- the future: left there, every call would move it again and the bucket
-- would never refill.
if moved and consume > 0 then
  store()
end
local retry = at + math.ceil((need - tokens) / per) * period - now
return {0, tokens, retry, next_refill(), now}

-- ratelimit_sliding: one decision of a sliding-window rate limiter.
--
-- KEYS[1]  the window (hash: segment end in server microseconds -> permits
--          consumed in that segment)
-- ARGV[1..3] consume, need, limit (see ratelimit_lib.lua)
-- ARGV[4]  window in whole milliseconds in [1, MAX_TTL_MS]
-- ARGV[5]  segments, a whole number in [1, window]
--
-- Result: {granted, remaining, retry_us, reset_us, now_us} (see
-- ratelimit_lib.lua).
-- Errors (nothing written):
--   WRONGTYPE ...              KEYS[1] is not a hash
--   COORDHOST_WRONGKIND <why>  KEYS[1] holds fields this script did not write
--   COORDHOST_BADARG <why>     an argument out of range
--
-- A permit consumed at t is counted in the segment ending at
-- e = (floor(t / seg) + 1) * seg > t (rounded forward) and stops counting
-- at e + window, never before t + window: so no interval of length window
-- ever holds more than the limit, and a permit is back at most one segment
-- later than an exact sliding log would give it back. The hash holds at
-- most segments + 1 live fields; expired ones are deleted on the next
-- grant, and the key expires when its last segment does.
-- Minimum server: Redis 6.2 (tested on 7.0). Not idempotent: never retry.

local consume, need, limit = permit_args()
local window = num(4, 'window', 1, MAX_TTL_MS)
local segments = num(5, 'segments (at most one per ms of the window)', 1, window)
local span = window * 1000
local seg = math.floor(span / segments)
local now = now_us()

local current = (math.floor(now / seg) + 1) * seg -- this segment's end
local flat = redis.call('HGETALL', KEYS[1])
local used = 0
local live = {}
local dead = {}
local ahead = 0 -- permits dated after the current segment (the server's clock went back)
local first = nil -- the earliest live segment's end
local current_field = int(current)
for i = 1, #flat, 2 do
  local e, n = whole(flat[i], MAX_US), whole(flat[i + 1], MAX_COUNT)
  if flat[i] == current_field and n and not counter(flat[i + 1]) then
    n = nil -- HINCRBY would refuse it after the HDEL
  end
  if not e or not n then
    wrong_kind('the window holds field ' .. string.format('%q', string.sub(flat[i], 1, 32)) .. ', not a segment count')
  end
  if e + span <= now then
    dead[#dead + 1] = flat[i]
  elseif e > current then
    -- Counted as if taken now: they still count for a whole window, and
    -- do not hold the limiter shut for as long as the clock went back.
    dead[#dead + 1] = flat[i]
    ahead = ahead + n
    used = used + n
  else
    used = used + n
    live[#live + 1] = {e, n}
    if not first or e < first then first = e end
  end
end
if ahead > 0 then
  live[#live + 1] = {current, ahead}
  if not first then first = current end
end

-- rewrite prunes the segments that ended a window ago, moves those dated
-- ahead into the current one, and adds consume to it. The key expires a
-- window after its latest segment, the current one: the expiry is set
-- when that segment starts counting (or the key held segments dated
-- ahead), and kept by the grants that add to it.
local function rewrite(consume)
  if #dead > 0 then
    redis.call('HDEL', KEYS[1], unpack(dead))
  end
  local added = consume + ahead
  if added > 0 and redis.call('HINCRBY', KEYS[1], current_field, added) == added or ahead > 0 then
    expire_at(current + span)
  end
end

if used + need <= limit then
  if consume > 0 then
    rewrite(consume)
    if not first then first = current end
  end
  local reset = 0
  if first then reset = first + span - now end
  return {1, limit - used - consume, 0, reset, now}
end

-- Refused: the earliest time enough segments have ended. Nothing is
-- written unless segments dated ahead must be moved back.
if ahead > 0 and consume > 0 then
  rewrite(0)
end
table.sort(live, function(a, b) return a[1] < b[1] end)
local retry, freed = 0, used
for i = 1, #live do
  freed = freed - live[i][2]
  if freed + need <= limit then
    retry = live[i][1] + span - now
    break
  end
end
local remaining = limit - used
if remaining < 0 then remaining = 0 end
return {0, remaining, retry, first + span - now, now}

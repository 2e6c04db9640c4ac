-- light_clean: one bounded step of the light clean, over the oldest end of the processing list.
--#include queue.lua
--#include wake.lua
--#include delay.lua
--#include take.lua
-- arg(1) most ids to examine, arg(2) max deliveries (0: no limit), arg(3) most due delayed items
-- to promote
-- Returns {examined, requeued, dropped, buried, promoted}.
-- Due delayed items are moved onto the main queue first, and lapsed registrations of blocked
-- workers are dropped. Each examined id is then taken from the tail of the processing list and:
-- dropped when its data key is gone (a completed item); pushed back onto the head of the
-- processing list when its lease is live; buried when it has been delivered max times; pushed
-- onto the main queue otherwise (its lease expired, or its worker died before taking the lease).
-- Repeated calls rotate through the whole list in its own order.
-- Keeps: an item with a live lease is never requeued, and a requeued id leaves the processing
-- list in the same step, so it is never both queued and leased.
local budget, max, due = tonumber(arg(1)), tonumber(arg(2)), tonumber(arg(3))
redis.call('LLEN', Q.queue)
redis.call('HLEN', Q.deliveries)
redis.call('HLEN', Q.reasons)
redis.call('ZCARD', Q.dead)
local now = now_ms()
local promoted = promote(Q, now, due)
leave(Q, '', now)
local examined, requeued, dropped, buried = 0, 0, 0, 0
for _ = 1, budget do
  local id = redis.call('LINDEX', Q.processing, -1)
  if not id then
    break
  end
  local data = redis.call('GET', Q.item .. id)
  redis.call('RPOP', Q.processing)
  examined = examined + 1
  if not data then
    forget(Q, id)
    dropped = dropped + 1
  elseif redis.call('EXISTS', Q.lease .. id) == 1 then
    redis.call('LPUSH', Q.processing, id)
  else
    local n = delivered(Q, id)
    if max > 0 and n >= max then
      bury(Q, id, data, n, 'lease expired', now)
      buried = buried + 1
    else
      if n > 0 then
        redis.call('HSET', Q.reasons, id, 'lease expired')
      end
      enqueue(Q, id, false)
      requeued = requeued + 1
    end
  end
end
return {examined, requeued, dropped, buried, promoted}

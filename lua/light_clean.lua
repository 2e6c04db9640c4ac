-- light_clean: one bounded step of the light clean, over the oldest end of the processing list.
--#include queue.lua
-- arg(1) most ids to examine
-- Returns {examined, requeued, dropped, buried}.
-- Due delayed items are moved onto the main queue first. Each examined id is then popped from the
-- tail of the processing list and: dropped when its data key is gone (a completed item); pushed
-- back onto the head of the processing list when its lease is live; buried when it has been
-- delivered max times; pushed onto the main queue otherwise (its lease expired, or its worker
-- died before taking the lease). Repeated calls rotate through the whole list in its own order.
-- Keeps: an item with a live lease is never requeued, and a requeued id leaves the processing
-- list in the same step, so it is never both queued and leased.
guard(Q, 'queue', 'processing', 'deliveries', 'reasons', 'dead', 'delayed')
local budget = tonumber(arg(1))
local now = now_ms()
promote(Q, now, budget)
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
    if Q.max > 0 and n >= Q.max then
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
return {examined, requeued, dropped, buried}

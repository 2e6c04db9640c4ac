-- stats: the counts of a queue, with one chunk of the processing list split into live leases and
-- expired ones awaiting a clean.
--#include queue.lua
-- arg(1) first index, arg(2) last index of the processing-list chunk to inspect
-- Returns {queued, processing, delayed, dead, examined, live}: the lengths of the main queue and
-- the processing list, the numbers of delayed and dead items, and of the chunk's ids how many were
-- examined and how many have a live lease.
-- Keeps: read only.
local chunk = redis.call('LRANGE', Q.processing, arg(1), arg(2))
local live = 0
for _, id in ipairs(chunk) do
  live = live + redis.call('EXISTS', Q.lease .. id)
end
return {
  redis.call('LLEN', Q.queue), redis.call('LLEN', Q.processing), redis.call('ZCARD', Q.delayed),
  redis.call('ZCARD', Q.dead), #chunk, live,
}

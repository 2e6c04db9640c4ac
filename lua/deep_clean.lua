-- deep_clean: requeue items that are in neither list and not leased, re-checking each one.
--#include queue.lua
--#include wake.lua
-- arg(1), arg(2), ... ids the caller found in neither list (a snapshot that may be stale by now)
-- Returns the ids that were requeued.
-- Keeps: an id is pushed only if, at this moment, its data key exists, it has no lease key, and
-- it is in neither list, so the deep clean never queues an item twice and never requeues a leased
-- (or delayed) one, whatever workers and other cleaners did since the snapshot.
redis.call('LLEN', Q.queue)
redis.call('LLEN', Q.processing)
local requeued = {}
for i = NQ + 1, #ARGV do
  local id = ARGV[i]
  if redis.call('EXISTS', Q.item .. id) == 1
    and redis.call('EXISTS', Q.lease .. id) == 0
    and not redis.call('LPOS', Q.processing, id)
    and not redis.call('LPOS', Q.queue, id) then
    enqueue(Q, id, false)
    requeued[#requeued + 1] = id
  end
end
return requeued

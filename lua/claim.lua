-- claim: hand out an id that a blocking BRPOPLPUSH has just moved onto the processing list.
--#include queue.lua
-- arg(1) lease length in ms, arg(2) lease token, arg(3) unused, arg(4) '1' to hand the item
-- out at most once, arg(5) the id that was moved, arg(6) the caller's waiter id
-- Returns {{queue index, id, data, deliveries, ms leased}}, or 0 when the id cannot be handed
-- out: a cleaner already gave it back to the main queue (it is no longer on the processing
-- list), it is no longer an item, it is a stray copy of a leased item, or it was buried; in
-- those last cases the id's entry is removed from the processing list.
-- Keeps: an id is leased only while it is on the processing list, so a cleaner that requeued it
-- between the move and this claim cannot make it both queued and leased. A worker that dies
-- before the claim leaves an id on the processing list without a lease: the next light clean
-- requeues it.
guard(Q, 'processing', 'deliveries', 'reasons', 'dead')
local id, once = arg(5), arg(4) == '1'
if not redis.call('LPOS', Q.processing, id) then
  return 0
end
local data = redis.call('GET', Q.item .. id)
local now = now_ms()
local taken = take(Q, id, data, arg(1), arg(2), once, now)
if taken then
  leave(Q, arg(6), now)
  if once then
    redis.call('LREM', Q.processing, 1, id)
  end
  return {taken}
end
-- Remove the entry the move made, but never the only entry of an item that another worker has
-- leased since (a clean requeued the id before this claim, and that worker leased it).
if redis.call('EXISTS', Q.item .. id) == 0 or #redis.call('LPOS', Q.processing, id, 'COUNT', 2) > 1 then
  redis.call('LREM', Q.processing, 1, id)
end
return 0

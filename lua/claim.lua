-- claim: hand out an id that a blocking BRPOPLPUSH has just moved onto the processing list.
--#include queue.lua
--#include wake.lua
--#include take.lua
-- arg(1) lease length in ms, arg(2) lease token, arg(3) '1' to hand the item out at most once,
-- arg(4) the id that was moved, arg(5) the caller's waiter id, arg(6) max deliveries
-- Returns {{queue index, id, data, deliveries, ms leased}}, or 0 when the id cannot be handed
-- out: a cleaner already gave it back to the main queue (it is no longer on the processing list),
-- it is no longer an item, it is a stray copy of a leased item, or it was buried.
-- Keeps: an id is leased only while it is on the processing list, so a cleaner that requeued it
-- between the move and this claim cannot make it both queued and leased. A worker that dies
-- before the claim leaves an id on the processing list without a lease: the next light clean
-- requeues it.
local ms, token, once, id, waiter = arg(1), arg(2), arg(3) == '1', arg(4), arg(5)
if not redis.call('LPOS', Q.processing, id) then
  return 0
end
local data = redis.call('GET', Q.item .. id)
local now = now_ms()
local taken = take(Q, id, data, ms, token, tonumber(arg(6)), once, now)
if taken then
  if waiter ~= '' then
    leave(Q, waiter, now)
  end
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

-- claim: hand out an id that a blocking BRPOPLPUSH has just moved onto the processing list.
--#include queue.lua
-- ARGV[4] lease length in ms, ARGV[5] lease token, ARGV[6] unused, ARGV[7] max deliveries
-- (0: no limit), ARGV[8] '1' to hand the item out at most once, ARGV[9] the id that was moved
-- Returns {id, data, deliveries}, or 0 when the id cannot be handed out: a cleaner already gave
-- it back to the main queue (it is no longer on the processing list), it is no longer an item,
-- it is a stray copy of a leased item, or it was buried; in those last cases the id is removed
-- from the processing list.
-- Keeps: an id is leased only while it is on the processing list, so a cleaner that requeued it
-- between the move and this claim cannot make it both queued and leased. A worker that dies
-- before the claim leaves an id on the processing list without a lease: the next light clean
-- requeues it.
local id, once = ARGV[9], ARGV[8] == '1'
if not redis.call('LPOS', Q.processing, id) then
  return 0
end
local taken = take(id, ARGV[4], ARGV[5], tonumber(ARGV[7]), once, now_ms())
if taken and not once then
  return taken
end
redis.call('LREM', Q.processing, 1, id)
return taken or 0

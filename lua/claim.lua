-- claim: lease an id that a blocking BRPOPLPUSH has just moved onto the processing list.
-- KEYS[1] processing list
-- ARGV[1] item-key prefix, ARGV[2] lease-key prefix, ARGV[3] lease length in ms,
-- ARGV[4] lease token, ARGV[5] the id that was moved
-- Returns {id, data} for the leased item, or 0 when the id cannot be leased: a cleaner already
-- gave it back to the main queue (it is no longer on the processing list), it is no longer an
-- item, or it is a stray copy of a leased item (then this copy is removed).
-- Keeps: an id is leased only while it is on the processing list, so a cleaner that requeued
-- it between the move and this claim cannot make it both queued and leased. A worker that dies
-- before the claim leaves an id on the processing list without a lease: the next light clean
-- requeues it.
--#include take.lua
local id = ARGV[5]
if not redis.call('LPOS', KEYS[1], id) then
  return 0
end
local taken = take(id)
if taken then
  return taken
end
redis.call('LREM', KEYS[1], 1, id)
return 0

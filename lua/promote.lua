-- promote: a delayed item falls due now: it goes to the leasing end of the main queue.
--#include queue.lua
--#include events.lua
--#include wake.lua
--#include group.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) item_id: the item's id
-- Returns 1 when the item was delayed and is now queued (on its group's list, when it has one:
-- group.lua), next to be leased; 0 when it was not
-- delayed (queued, leased, dead, or no such item): nothing changed, but a leftover entry of the
-- delayed set (of an item leased or gone since) is dropped.
-- Keeps: as the lease's own promotion of due items (delay.lua): the delay lease goes with the
-- entry, and the id is pushed once; an item a worker holds is never queued. Every key the call
-- may write is type-checked before its first write.
local id = arg(1)
local lease = Q.lease .. id
if not redis.call('ZSCORE', Q.delayed, id) then
  return 0
end
check_types('string', {lease}, 'list', {Q.queue})
check_wake(Q)
check_groups(Q)
local held = redis.call('GET', lease)
local delivery = delivery_of(Q, id)
redis.call('ZREM', Q.delayed, id)
if held == DELAY_TOKEN then
  redis.call('DEL', lease)
elseif held then
  return 0
end
if redis.call('EXISTS', Q.item .. id) == 0 then
  return 0
end
requeue(Q, id, true)
emit(Q, 'promoted', id, delivery)
return 1

-- complete: mark an item as done and remove every trace of it.
--#include queue.lua
-- ARGV[4] item id
-- Returns 1 when this call deleted the data key (it completed the item), 0 when the item had
-- already been completed (or expired).
-- Keeps: exactly one call returns 1 per item. The processing list is searched from its tail,
-- where the oldest leases sit, so completing in lease order stays O(1); no bookkeeping of the
-- item is left behind.
local id = ARGV[4]
local removed = redis.call('DEL', Q.item .. id)
redis.call('LREM', Q.processing, -1, id)
redis.call('DEL', Q.lease .. id)
forget(id)
return removed

-- complete: mark items as done and remove every trace of them.
--#include queue.lua
-- arg(1), arg(2), ... item ids
-- Returns, per id, 1 when this call deleted its data key (it completed the item) and 0 when the
-- item had already been completed (or had expired).
-- Keeps: exactly one call returns 1 per item. The processing list is searched from its tail,
-- where the oldest leases sit, so completing in lease order stays O(1) per item; no bookkeeping
-- of an item is left behind.
guard(Q, 'processing', 'deliveries', 'reasons', 'delayed')
local done = {}
for i = 4 * NQ + 1, #ARGV do
  local id = ARGV[i]
  done[#done + 1] = redis.call('DEL', Q.item .. id)
  redis.call('LREM', Q.processing, -1, id)
  redis.call('DEL', Q.lease .. id)
  redis.call('ZREM', Q.delayed, id)
  forget(Q, id)
end
return done

-- complete: mark an item as done and remove every trace of it.
-- KEYS[1] processing list, KEYS[2] the item's data key, KEYS[3] the item's lease key
-- ARGV[1] item id
-- Returns 1 when this call deleted the data key (it completed the item), 0 when the item had
-- already been completed.
-- Keeps: exactly one call returns 1 per item. The processing list is searched from its tail,
-- where the oldest leases sit, so completing in lease order stays O(1).
local removed = redis.call('DEL', KEYS[2])
redis.call('LREM', KEYS[1], -1, ARGV[1])
redis.call('DEL', KEYS[3])
return removed

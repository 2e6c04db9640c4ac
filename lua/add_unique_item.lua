-- add_unique_item: add an item whose id the caller knows to be new, skipping the existence check.
-- KEYS[1] main queue, KEYS[2] the item's data key
-- ARGV[1] item id, ARGV[2] item data
-- Returns 1.
-- Keeps: the data key is written before the id is pushed. An id that was in fact already queued
-- is queued twice; the lease script drops the second copy when it meets it.
redis.call('SET', KEYS[2], ARGV[2])
redis.call('LPUSH', KEYS[1], ARGV[1])
return 1

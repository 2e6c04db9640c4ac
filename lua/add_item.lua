-- add_item: add an item unless an item with that id already exists.
-- KEYS[1] main queue, KEYS[2] the item's data key
-- ARGV[1] item id, ARGV[2] item data
-- Returns 1 when the item was added, 0 when its data key already existed (nothing changed).
-- Keeps: the data key is written before the id is pushed, and an existing item is never queued
-- a second time.
if redis.call('SET', KEYS[2], ARGV[2], 'NX') then
  redis.call('LPUSH', KEYS[1], ARGV[1])
  return 1
end
return 0

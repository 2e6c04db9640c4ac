-- deep_clean: requeue items that are in neither list and not leased, re-checking each one.
-- KEYS[1] main queue, KEYS[2] processing list
-- ARGV[1] item-key prefix, ARGV[2] lease-key prefix, ARGV[3..] ids the caller found in neither
-- list (a snapshot that may be stale by now)
-- Returns the ids that were requeued.
-- Keeps: an id is pushed only if, at this moment, its data key exists, it has no lease, and it is
-- in neither list, so the deep clean never queues an item twice and never requeues a leased one,
-- whatever workers and other cleaners did since the snapshot.
local requeued = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('EXISTS', ARGV[1] .. id) == 1
    and redis.call('EXISTS', ARGV[2] .. id) == 0
    and not redis.call('LPOS', KEYS[2], id)
    and not redis.call('LPOS', KEYS[1], id) then
    redis.call('LPUSH', KEYS[1], id)
    requeued[#requeued + 1] = id
  end
end
return requeued

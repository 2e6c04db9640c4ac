-- lease: move the oldest queued id to the processing list and lease it, without blocking.
-- KEYS[1] main queue, KEYS[2] processing list
-- ARGV[1] item-key prefix, ARGV[2] lease-key prefix, ARGV[3] lease length in ms,
-- ARGV[4] lease token, ARGV[5] most ids to examine in this call
-- Returns {id, data} for the leased item; 0 when the queue is empty; 1 when ARGV[5] ids were
-- dropped (ids of completed items, or stray copies of leased ones) and the caller should call
-- again.
-- Keeps: an id enters the processing list and gets its lease in the same step, so a leased item
-- is always in the processing list; an id without a data key is dropped, never handed out.
--#include take.lua
local budget = tonumber(ARGV[5])
for _ = 1, budget do
  local id = redis.call('RPOP', KEYS[1])
  if not id then
    return 0
  end
  local taken = take(id)
  if taken then
    redis.call('LPUSH', KEYS[2], id)
    return taken
  end
end
return 1

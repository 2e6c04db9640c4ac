-- lease: take the oldest queued item and lease it (or hand it out at most once), without
-- blocking. Due delayed items are moved onto the main queue first.
--#include queue.lua
-- ARGV[4] lease length in ms, ARGV[5] lease token, ARGV[6] most ids to examine,
-- ARGV[7] max deliveries (0: no limit), ARGV[8] '1' to hand the item out at most once
-- Returns {id, data, deliveries} for the item handed out; when the queue is empty, the ms until
-- the next delayed item is due, or -1 if none is; -2 when ARGV[6] ids were dropped or buried
-- and the caller should call again.
-- Keeps: an id enters the processing list and gets its lease in the same step, so a leased item
-- is always on the processing list; an id without a data key is dropped, never handed out; an
-- item is never handed out more than max deliveries times.
local ms, token, budget = ARGV[4], ARGV[5], tonumber(ARGV[6])
local max, once = tonumber(ARGV[7]), ARGV[8] == '1'
local now = now_ms()
promote(now, budget)
for _ = 1, budget do
  local id = redis.call('RPOP', Q.queue)
  if not id then
    return next_due(now)
  end
  local taken = take(id, ms, token, max, once, now)
  if taken then
    if not once then
      redis.call('LPUSH', Q.processing, id)
    end
    return taken
  end
end
return -2

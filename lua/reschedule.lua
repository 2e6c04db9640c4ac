-- reschedule: give a queued or delayed item a new due time.
--#include queue.lua
--#include wake.lua
--#include delay.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) item_id: the item's id
-- arg(2) delay_ms: the new delay in ms from now (used when due_ms is 0)
-- arg(3) due_ms: the new due time in ms since the epoch (0: none)
-- Returns 1 when the item was queued or delayed and is now delayed until the new time; 0 when it
-- is leased (or its lease ran out and no clean has requeued it yet), dead or gone: nothing
-- changed.
-- Keeps: a rescheduled item is in the delayed set with its delay lease, as an added delayed item
-- is (delay.lua), and no longer on the main queue: its id is removed from the queue (LREM, from
-- the end it is nearer to when it is within NEAR entries of one, else one pass over the queue),
-- counted in P:removals as a cancel's is (cancel.lua).
-- Every key the call may write is type-checked before its first write.
local NEAR = '1000'
local id, delay, at = arg(1), tonumber(arg(2)), tonumber(arg(3))
local item, lease = Q.item .. id, Q.lease .. id
check_types('string', {item, lease, Q.removals}, 'list', {Q.queue}, 'zset', {Q.delayed})
check_wake(Q)
if SIZES[item] == 0 and redis.call('EXISTS', item) == 0 then
  return 0
end
local held = redis.call('GET', lease)
local delayed = held == DELAY_TOKEN or (not held and redis.call('ZSCORE', Q.delayed, id))
if not delayed then
  if held or (delivered(Q, id) > 0 and redis.call('LPOS', Q.processing, id)) then
    return 0
  end
  local removed
  if redis.call('LPOS', Q.queue, id, 'RANK', '-1', 'MAXLEN', NEAR) then
    removed = redis.call('LREM', Q.queue, '-1', id)
  else
    removed = redis.call('LREM', Q.queue, '1', id)
  end
  if removed > 0 then
    redis.call('INCR', Q.removals)
  end
end
local now = now_ms()
schedule(Q, id, at > 0 and at or now + delay, now)
return 1

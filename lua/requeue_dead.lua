-- requeue_dead: put dead letters back on the main queue with their delivery count reset.
--#include queue.lua
--#include wake.lua
--#include dead.lua
-- arg(1)... as dead.lua
-- Returns {requeued, skipped}: how many were requeued, and how many chosen ids were not dead
-- letters or are in use by a live item again (those stay dead).
-- Keeps: a dead letter becomes an item again (data key, then queue) in one step.
redis.call('LLEN', Q.queue)
redis.call('ZCARD', Q.dead)
redis.call('HLEN', Q.deliveries)
redis.call('HLEN', Q.reasons)
local requeued, skipped = 0, 0
for _, id in ipairs(chosen_dead()) do
  local key = Q.dead_item .. id
  local data = redis.call('HGET', key, 'data')
  if data and redis.call('SET', Q.item .. id, data, 'NX') then
    redis.call('DEL', key)
    redis.call('ZREM', Q.dead, id)
    forget(Q, id)
    enqueue(Q, id, false)
    requeued = requeued + 1
  else
    if not data then
      redis.call('ZREM', Q.dead, id)
    end
    skipped = skipped + 1
  end
end
return {requeued, skipped}

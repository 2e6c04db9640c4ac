-- deep_clean_hold: the deep clean holds the items it suspects are lost.
--#include queue.lua
--#include hold.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) token: the run's token
-- arg(2) hold_ms: how long a hold lasts, in ms
-- arg(3...) ids: the suspects: ids with a data key and no lease that the run's first walk of the
--   main queue did not see
-- Returns {microseconds this call held Redis, {ids held}}.
-- Keeps: only an item that exists (its data key a string) and has no lease key (so it is
-- neither leased nor delayed) is held; a hold is a lease, so from now on nothing queues the item
-- (see hold.lua). A hold that outlives a crashed run just lapses: the item is then as it was
-- before. All lease keys are read
-- before the first write, so a key of the wrong type fails the call before anything is written.
local hold, ms = HOLD_PREFIX .. arg(1), tonumber(arg(2))
local free = {}
for i = NQ + 3, #ARGV do
  local id = ARGV[i]
  local lease = redis.call('GET', Q.lease .. id)
  if not lease and is_data(Q.item .. id) then
    free[#free + 1] = id
  end
end
for _, id in ipairs(free) do
  redis.call('SET', Q.lease .. id, hold, 'PX', ms)
end
return {elapsed(), free}

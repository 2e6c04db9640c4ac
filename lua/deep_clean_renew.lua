-- deep_clean_renew: the deep clean keeps its holds while it runs.
--#include queue.lua
--#include hold.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) token: the run's token
-- arg(2) hold_ms: how long each hold lasts from now, in ms
-- arg(3...) ids: ids this run held
-- Returns {microseconds this call held Redis, how many holds were renewed}.
-- Keeps: only a hold of this run is renewed; never makes one. A lease taken since, a hold
-- removed (the item queued) or a hold that lapsed is left alone, so a hold that lapsed while the
-- run could not reach Redis stays lapsed. All lease keys are read before the first write, so a
-- key of the wrong type fails the call before anything is written.
local hold, ms = HOLD_PREFIX .. arg(1), tonumber(arg(2))
local mine = {}
for i = NQ + 3, #ARGV do
  local key = Q.lease .. ARGV[i]
  if redis.call('GET', key) == hold then
    mine[#mine + 1] = key
  end
end
for _, key in ipairs(mine) do
  redis.call('PEXPIRE', key, ms)
end
return {elapsed(), #mine}

-- schedule_set: create a schedule of the queue, or replace it (its pause and its last id stay).
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) name: the schedule's name
-- arg(2) spec: its definition (JSON text, made and read by ops/schedules.py)
-- arg(3) data: the data each of its occurrences carries
-- arg(4) next_ms: when its first occurrence is due, in ms since the epoch ('+inf': never)
-- Returns 1 when the schedule was created, 2 when it was replaced, 0 when it existed with this
-- definition and data (nothing changed, its next due time included).
-- Keeps: a schedule's name is in P:schedules, P:schedules:data and P:schedules:due, or in none of
-- them; a paused schedule stays paused when it is replaced; every key the call may write is
-- type-checked before its first write.
local name, spec, data = arg(1), arg(2), arg(3)
check_types('hash', {Q.schedules, Q.schedules_data}, 'zset', {Q.schedules_due})
local score = redis.call('ZSCORE', Q.schedules_due, name)
if score and redis.call('HGET', Q.schedules, name) == spec
  and redis.call('HGET', Q.schedules_data, name) == data then
  return 0
end
redis.call('HSET', Q.schedules, name, spec)
redis.call('HSET', Q.schedules_data, name, data)
if not (score and tonumber(score) < 0) then
  redis.call('ZADD', Q.schedules_due, arg(4), name)
end
return score and 2 or 1

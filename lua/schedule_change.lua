-- schedule_change: pause, resume or remove a schedule of the queue.
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) name: the schedule's name
-- arg(2) action: 'pause', 'resume' or 'remove'
-- arg(3) spec: for 'resume', the definition the caller read (the next due time is its)
-- arg(4) next_ms: for 'resume', the next due time in ms since the epoch ('+inf': never)
-- Returns 1 when the schedule changed; 0 when there is no such schedule, or it was paused (for
-- 'pause') or running (for 'resume') already; -1 for a 'resume' whose definition changed since
-- the caller read it (nothing changed).
-- Keeps: a paused schedule's next due time is -1, so no scheduler takes it; a removed schedule
-- leaves nothing behind but the occurrences it added; every key the call may write is
-- type-checked before its first write.
local name, action = arg(1), arg(2)
check_types('hash', {Q.schedules, Q.schedules_data, Q.schedules_last}, 'zset', {Q.schedules_due})
local score = redis.call('ZSCORE', Q.schedules_due, name)
if not score then
  return 0
end
local paused = tonumber(score) < 0
if action == 'remove' then
  redis.call('ZREM', Q.schedules_due, name)
  redis.call('HDEL', Q.schedules, name)
  redis.call('HDEL', Q.schedules_data, name)
  redis.call('HDEL', Q.schedules_last, name)
  return 1
elseif action == 'pause' then
  if paused then
    return 0
  end
  redis.call('ZADD', Q.schedules_due, '-1', name)
  return 1
end
if not paused then
  return 0
end
if redis.call('HGET', Q.schedules, name) ~= arg(3) then
  return -1
end
redis.call('ZADD', Q.schedules_due, arg(4), name)
return 1

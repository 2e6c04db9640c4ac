-- schedule_due: the queue's schedules that are due, soonest first, with the server's time.
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) owner: the worker taking the fleet's turn to add occurrences ('': no turn is taken)
-- arg(2) turn_ms: how long a turn lasts, in ms
-- arg(3) limit: the most due schedules returned
-- Returns {now_ms, taken, name, due_ms, spec, ...}: the server's time in ms; taken, 0 when
-- another worker holds the turn (no schedule is read) and 1 otherwise; then each due schedule's
-- name, next due time and definition, at most limit of them.
-- Keeps: read only, but for the turn: P:schedules:turn is set (NX, with an expiry) only while
-- the queue has schedules, so a queue without any is never written; the read is bounded by
-- limit however many schedules there are.
local owner, turn, limit = arg(1), arg(2), arg(3)
local now = now_ms()
if owner ~= '' then
  if redis.call('EXISTS', Q.schedules_due) == 0 then
    return {now, 0}
  end
  check_types('string', {Q.schedules_turn})
  if not redis.call('SET', Q.schedules_turn, owner, 'NX', 'PX', turn) then
    return {now, 0}
  end
end
local due = redis.call('ZRANGEBYSCORE', Q.schedules_due, 0, now, 'WITHSCORES', 'LIMIT', 0, limit)
local out = {now, 1}
if #due == 0 then
  return out
end
local names = {}
for i = 1, #due, 2 do
  names[#names + 1] = due[i]
end
local specs = redis.call('HMGET', Q.schedules, unpack(names))
for k, name in ipairs(names) do
  out[#out + 1] = name
  out[#out + 1] = due[2 * k]
  out[#out + 1] = specs[k]
end
return out

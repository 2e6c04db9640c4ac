-- schedule_list: one page of the queue's schedules, by next due time (paused ones first).
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) first: the rank of the first schedule of the page
-- arg(2) last: the rank of its last schedule
-- Returns {name, due_ms, spec, last_id, ...} for each schedule of the page: its next due time
-- (-1: paused; 'inf': none left), its definition and the id of its last occurrence (false: none).
-- Keeps: read only; bounded by the page.
local page = redis.call('ZRANGE', Q.schedules_due, arg(1), arg(2), 'WITHSCORES')
if #page == 0 then
  return {}
end
local names = {}
for i = 1, #page, 2 do
  names[#names + 1] = page[i]
end
local specs = redis.call('HMGET', Q.schedules, unpack(names))
local lasts = redis.call('HMGET', Q.schedules_last, unpack(names))
local out = {}
for k, name in ipairs(names) do
  out[#out + 1] = name
  out[#out + 1] = page[2 * k]
  out[#out + 1] = specs[k]
  out[#out + 1] = lasts[k]
end
return out

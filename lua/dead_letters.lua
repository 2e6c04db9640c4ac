-- dead_letters: read one page of the dead-letter store, oldest first.
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) first: the first index
-- arg(2) last: the last index (inclusive; negative counts from the newest)
-- Returns a list of {id, data, deliveries, reason, ms buried}.
-- Keeps: read only.
local page = redis.call('ZRANGE', Q.dead, arg(1), arg(2), 'WITHSCORES')
local out = {}
for i = 1, #page, 2 do
  local id = page[i]
  local h = redis.call('HMGET', Q.dead_item .. id, 'data', 'deliveries', 'reason')
  out[#out + 1] = {id, h[1] or '', tonumber(h[2] or '0'), h[3] or '', tonumber(page[i + 1])}
end
return out

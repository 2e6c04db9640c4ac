-- peek: read a page of the main queue without taking anything.
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) first: the first index, as an LRANGE index of the main queue list
-- arg(2) last: the last index
-- Returns {length of the main queue, {id, data}, ...}: the page in list order (data is nil for an
-- id whose item is gone).
-- Keeps: read only.
local ids = redis.call('LRANGE', Q.queue, arg(1), arg(2))
local out = {redis.call('LLEN', Q.queue)}
for _, id in ipairs(ids) do
  out[#out + 1] = {id, redis.call('GET', Q.item .. id)}
end
return out

-- stats: the counts of a queue, with one chunk of the processing list split into live leases and
-- expired ones awaiting a clean.
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) first: the first index of the processing-list chunk to inspect
-- arg(2) last: its last index
-- arg(3...) groups: groups whose counts to read (see group.lua)
-- Returns {queued, processing, delayed, dead, examined, live, gone, rate, grouped, cap, groups,
-- group_rate}:
-- the lengths of the main queue and the processing list, the numbers of delayed and dead items,
-- of the chunk's ids how many were examined, how many have a live lease, and how many are
-- entries of completed items (no lease, no data key) left for the light clean to drop; the
-- queue's rate limit, {count, per_ms, burst} (see rate.lua; count false or '0' when it has
-- none); the items waiting on the groups' lists, the group concurrency (false for none),
-- for each group asked, {ready, in flight, paused, its own rate limit ('count per_ms burst',
-- false for none), waiting out its limit}, and the rate limit of every group (false or '0' for
-- none).
-- Keeps: read only.
local groups = {}
for i = NQ + 3, #ARGV do
  local g = ARGV[i]
  local s = redis.call('HMGET', Q.groups_state, 'b:' .. g, 'p:' .. g, 'r:' .. g, 'q:' .. g)
  local ready = redis.call('LLEN', Q.group .. g)
  groups[#groups + 1] = {ready, tonumber(s[1] or '0'), s[2] and 1 or 0, s[3], s[4] == 'w' and 1 or 0}
end
local chunk = redis.call('LRANGE', Q.processing, arg(1), arg(2))
local live, gone = 0, 0
for _, id in ipairs(chunk) do
  if redis.call('EXISTS', Q.lease .. id) == 1 then
    live = live + 1
  else
    gone = gone + 1 - redis.call('EXISTS', Q.item .. id)
  end
end
return {
  redis.call('LLEN', Q.queue), redis.call('LLEN', Q.processing), redis.call('ZCARD', Q.delayed),
  redis.call('ZCARD', Q.dead), #chunk, live, gone,
  redis.call('HMGET', Q.rate, 'count', 'per_ms', 'burst'),
  redis.call('HGET', Q.groups_state, 'ready') or 0, redis.call('HGET', Q.groups_state, 'cap'),
  groups, redis.call('HGET', Q.groups_state, 'rate'),
}

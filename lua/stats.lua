-- stats: the counts of a queue, with one chunk of the processing list split into live leases and
-- expired ones awaiting a clean.
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) first: the first index of the processing-list chunk to inspect
-- arg(2) last: its last index
-- arg(3) top: how many of the groups with the most items waiting to read as well (0: none)
-- arg(4...) groups: groups whose counts to read (see group.lua)
-- Returns {queued, processing, delayed, dead, examined, live, gone, rate, grouped, cap, groups,
-- waiting, top, group_rate}:
-- the lengths of the main queue (less a wake-up entry: wakeups in queue.lua) and the processing
-- list, the numbers of delayed and dead items,
-- of the chunk's ids how many were examined, how many have a live lease, and how many are
-- entries of completed items (no lease, no data key) left for the light clean to drop; the
-- queue's rate limit, {count, per_ms, burst} (see rate.lua; count false or '0' when it has
-- none); the items waiting on the groups' lists, the group concurrency (false for none),
-- for each group asked, {ready, in flight, paused, its own rate limit ('count per_ms burst',
-- false for none), waiting out its limit}; how many groups have items waiting on their lists
-- (the members of P:groups:backlog), and the top groups among them, most items first (the
-- bounded read of the metrics), each {group, then the same counts}; and the rate limit of
-- every group (false or '0' for none).
-- Keeps: read only.
local function counts_of(g)
  local s = redis.call('HMGET', Q.groups_state, 'b:' .. g, 'p:' .. g, 'r:' .. g, 'q:' .. g)
  return {redis.call('LLEN', Q.group .. g), tonumber(s[1] or '0'), s[2] and 1 or 0, s[3],
    s[4] == 'w' and 1 or 0}
end
local groups = {}
for i = NQ + 4, #ARGV do
  groups[#groups + 1] = counts_of(ARGV[i])
end
local top = {}
local wanted = tonumber(arg(3))
if wanted > 0 then
  for _, g in ipairs(redis.call('ZREVRANGE', Q.groups_backlog, 0, wanted - 1)) do
    local c = counts_of(g)
    top[#top + 1] = {g, c[1], c[2], c[3], c[4], c[5]}
  end
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
  redis.call('LLEN', Q.queue) - wakeups(Q), redis.call('LLEN', Q.processing),
  redis.call('ZCARD', Q.delayed),
  redis.call('ZCARD', Q.dead), #chunk, live, gone,
  redis.call('HMGET', Q.rate, 'count', 'per_ms', 'burst'),
  redis.call('HGET', Q.groups_state, 'ready') or 0, redis.call('HGET', Q.groups_state, 'cap'),
  groups, redis.call('ZCARD', Q.groups_backlog), top, redis.call('HGET', Q.groups_state, 'rate'),
}

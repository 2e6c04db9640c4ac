-- metrics: what a metrics exporter reads of a queue besides its stats, in one read-only call.
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) due_cap: the most due delayed items to count (the count is capped there: it reads their
--   ids)
-- arg(2) top_groups: how many groups to rank by backlog
-- Returns {now, counts, durations, oldest, due, first_due, workers, top}: the server time in ms,
-- the flat HGETALL of P:counts and of P:durations, the id at the old end of the main queue (the
-- next to be leased, past a wake-up entry: wakeups in queue.lua; nil when empty), how many
-- delayed items are due (at most arg(1)), the due
-- time in ms of the earliest delayed item (nil when none), how many workers' registrations are
-- live, and the top_groups groups with the most items waiting on their lists, flat (group,
-- count), most first (see group.lua).
-- Keeps: read only.
local now = now_ms()
local first = redis.call('ZRANGE', Q.delayed, 0, 0, 'WITHSCORES')
return {
  now, redis.call('HGETALL', Q.counts), redis.call('HGETALL', Q.durations),
  redis.call('LINDEX', Q.queue, -1 - wakeups(Q)),
  #redis.call('ZRANGEBYSCORE', Q.delayed, '-inf', now, 'LIMIT', 0, tonumber(arg(1))),
  first[2] or false, #redis.call('ZRANGEBYSCORE', Q.workers, '(' .. now, '+inf'),
  redis.call('ZREVRANGE', Q.groups_backlog, 0, tonumber(arg(2)) - 1, 'WITHSCORES'),
}

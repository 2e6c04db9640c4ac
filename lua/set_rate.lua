-- set_rate: set, declare or remove a queue's rate limit (see rate.lua).
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) mode: 'set' to set the limit (or remove it, with count 0), 'declare' to set it only
--   when none was ever set
-- arg(2) count: the items per window (0: no limit)
-- arg(3) per_ms: the window in ms
-- arg(4) burst: the most items at once
-- Returns 1 when the limit was written, 0 when a declaration found one set already.
-- Keeps: the bucket's tokens and the waiters' turns carry over a change of limit (the tokens
-- capped at the new burst when they are next read), the pacing clock starts afresh; a queue
-- that never had a limit gets no P:rate from a removal. A declaration comes just before a
-- lease, so it also checks every key of the queue that the lease may write (but the per-item
-- ones): a lease that fails on a wrong type fails here first, unchanged.
local mode, items = arg(1), arg(2)
check_types('hash', {Q.rate})
if mode == 'declare' then
  check_types('list', {Q.queue, Q.processing, Q.wake, Q.groups}, 'hash', {Q.deliveries, Q.reasons,
    Q.counts}, 'zset', {Q.delayed, Q.dead, Q.waiting, Q.groups_backlog, Q.groups_paced})
end
if mode == 'declare' and redis.call('HGET', Q.rate, 'count') then
  return 0
end
if items == '0' and SIZES[Q.rate] == 0 then
  return 1
end
redis.call('HSET', Q.rate, 'count', items, 'per_ms', arg(3), 'burst', arg(4))
-- The pacing clock starts afresh: one kept under a slower limit may be far ahead.
redis.call('HDEL', Q.rate, 'tat')
return 1

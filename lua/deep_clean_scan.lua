-- deep_clean_scan: one SCAN step of the deep clean over the queue's data keys (or group lists).
--#include queue.lua
--#include hold.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) cursor: the SCAN cursor
-- arg(2) count: the COUNT hint
-- arg(3) pattern: the pattern of the data keys (P:item:*, with P glob-escaped), or of the group
--   lists (P:group:*)
-- Returns {microseconds this call held Redis, next cursor, {data keys}}. Leased items are among
-- them: the hold step skips them (checking their leases here would cost every queued item a
-- lookup that the first walk of the main queue makes needless).
-- Keeps: writes nothing; never KEYS, and only this queue's data keys match the pattern. As the
-- first call of a deep clean it reads every key of the queue that a later step may write, so a
-- key of the wrong type fails the clean before anything is written.
check_types('list', {Q.queue, Q.processing, Q.wake, Q.groups}, 'hash', {Q.deliveries, Q.reasons,
  Q.counts, Q.grouped, Q.groups_state}, 'zset', {Q.dead, Q.delayed, Q.waiting, Q.groups_backlog})
local found = redis.call('SCAN', arg(1), 'MATCH', arg(3), 'COUNT', tonumber(arg(2)))
return {elapsed(), found[1], found[2]}

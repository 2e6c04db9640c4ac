-- requeue_dead: put dead letters back on the main queue with their delivery count reset.
--#include queue.lua
--#include events.lua
--#include wake.lua
--#include dead.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) which: 'oldest' or 'ids' (see dead.lua)
-- arg(2...) chosen: with 'oldest', how many of the oldest dead letters, then how many of the
--   oldest to pass over (optional, 0); with 'ids', the ids
-- Returns {requeued, skipped, kept}: how many were requeued, how many chosen ids were not dead
-- letters or are in use by a live item again, and how many of those stay dead (the ones in
-- use: a caller going through the oldest passes over them next time; with 'oldest' every chosen
-- id is a dead letter).
-- Keeps: a dead letter becomes an item again (data key, then queue) in one step, and with
-- results kept its failure record (take.lua's bury) goes with it, so that result() waits for the
-- new try; every key the call may write is type-checked before its first write.
-- Every key the call may write is checked before its first write: each dead letter's data is
-- read first (a data key of another type makes SET NX skip that id and leave the key alone).
local ids = chosen_dead()
local datas, counts = {}, {}
for i, id in ipairs(ids) do
  local letter = redis.call('HMGET', Q.dead_item .. id, 'data', 'deliveries')
  datas[i], counts[i] = letter[1], letter[2]
end
local records = {}
if Q.keep then
  for i, id in ipairs(ids) do
    records[i] = Q.result .. id
  end
end
check_types('list', {Q.queue}, 'zset', {Q.dead}, 'hash', {Q.deliveries, Q.reasons, Q.counts},
  'list', records)
check_wake(Q)
local requeued, skipped, kept = 0, 0, 0
for i, id in ipairs(ids) do
  local data = datas[i]
  if data and redis.call('SET', Q.item .. id, data, 'NX') then
    redis.call('DEL', Q.dead_item .. id)
    redis.call('ZREM', Q.dead, id)
    if Q.keep then
      redis.call('DEL', records[i])
    end
    forget(Q, id)
    enqueue(Q, id, false)
    requeued = requeued + 1
    emit(Q, 'requeued', id, counts[i] or nil)
  else
    if not data then
      redis.call('ZREM', Q.dead, id)
    else
      kept = kept + 1
    end
    skipped = skipped + 1
  end
end
count(Q, 'requeued', requeued)
return {requeued, skipped, kept}

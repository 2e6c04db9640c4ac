-- take: hand items out, or bury them in the dead-letter store.
--#include queue.lua
--#include events.lua
-- Keys: P:item:<id>, P:lease:<id>, P:deliveries, P:reasons, P:dead, P:dead:<id>, and with
-- results kept P:result:<id>.
-- Defines: bury, bury_keys, take.
-- Keeps: an item is never handed out more than max deliveries times; a buried item keeps its
-- data, delivery count and reason; with results kept (keep_results), its result key holds its
-- failure record ('d' then the reason) as long as a result is kept, so that a caller blocked on
-- it (result()) wakes as it dies.

-- Move an item to the dead-letter store: its data, delivery count and reason are kept under a key
-- outside P:item:*, so no cleaner of any implementation brings it back. The caller checks the dead
-- set, the dead letter's hash, the bookkeeping hashes and the counters beforehand (see bury_keys).
local function bury(q, id, data, deliveries, reason, now)
  local key = q.dead_item .. id
  redis.call('DEL', key)
  redis.call('HSET', key, 'data', data, 'deliveries', deliveries, 'reason', reason or '')
  redis.call('ZADD', q.dead, now, id)
  redis.call('DEL', q.item .. id, q.lease .. id)
  if q.keep then
    local result = q.result .. id
    redis.call('DEL', result)
    redis.call('RPUSH', result, 'd' .. (reason or ''))
    redis.call('PEXPIRE', result, q.keep)
  end
  forget(q, id)
  count(q, 'dead')
  emit(q, 'dead', id, deliveries, reason)
end

-- The keys that burying ids would write (those of ids whose delivery count, as read from
-- P:deliveries, has reached max), as arguments of check_types or wrong_type.
local function bury_keys(q, ids, counts, max)
  local letters, results = {}, {}
  if max > 0 then
    for i, id in ipairs(ids) do
      if tonumber(counts[i] or '0') >= max then
        letters[#letters + 1] = q.dead_item .. id
        if q.keep then
          results[#results + 1] = q.result .. id
        end
      end
    end
  end
  if #letters > 0 then
    letters[#letters + 1] = q.counts
    return 'zset', {q.dead}, 'hash', letters, 'list', results
  end
  return 'zset', {}, 'hash', letters, 'list', results
end

-- Hand out an id just taken off the main queue (data: its data key's value, read before the id
-- was taken; a data key of another type reads as none, and the id is dropped). The caller checks
-- the bookkeeping hashes beforehand, and bury_keys. Returns the item's delivery count (this
-- delivery's), or nil when the id is not an item any more, is a copy of a leased item (then nil,
-- true: see stray.lua), or has been delivered max times (it is then buried). With once, the item
-- is removed as it is handed out (at most once); otherwise it is leased for ms with the lease
-- value stamp ('<token>@<now>', made once by the caller).
-- seen, when given, is the id's delivery count read from P:deliveries (HMGET: false for none)
-- before any id of the call was taken: the new count is not written then, and the caller writes
-- those of the ids handed out (see lease.lua); else it is counted here.
local function take(q, id, data, ms, stamp, max, once, now, seen)
  if not data then
    forget(q, id)
    return nil
  end
  local lease = q.lease .. id
  local n
  if once then
    if redis.call('EXISTS', lease) == 1 then
      return nil, true
    end
  elseif not redis.call('SET', lease, stamp, 'PX', ms, 'NX') then
    return nil, true
  end
  if seen ~= nil then
    n = tonumber(seen or '0') + 1
  elseif once then
    n = delivered(q, id) + 1
  else
    n = redis.call('HINCRBY', q.deliveries, id, '1')
  end
  if max > 0 and n > max then
    bury(q, id, data, n - 1, redis.call('HGET', q.reasons, id), now)
    return nil
  end
  if once then
    redis.call('DEL', q.item .. id)
    forget(q, id)
  end
  emit(q, 'leased', id, n)
  return n
end

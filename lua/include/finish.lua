-- finish: complete items (mark them done and remove every trace of them).
--#include queue.lua
--#include events.lua
--#include wake.lua
--#include group.lua
-- Keys: P:item:<id>, P:lease:<id>, P:processing, P:delayed, P:deliveries, P:reasons, P:counts;
-- P:grouped and, for a grouped item, its group's keys (group.lua).
-- Defines: finish.
-- Keeps: exactly one call completes an item; no bookkeeping of an item is left behind; every key
-- finish may write is type-checked before its first write, or is that first write (the delivery
-- counts' drop; a lease key of another type is left alone). The id is looked for near the oldest
-- end of the processing list first (completing in lease order), then near the newest end (short
-- jobs among long ones); an entry found near
-- neither end stays on the list for the light clean, which drops ids whose item is gone (as the
-- design's cleaners do), so completing one item never scans the whole list. A batch removes an
-- entry per id (LREM), or, when its ids are the list's oldest entries (a batch completed as it
-- was leased), those entries at once (LTRIM). A grouped item that was in flight (marked so in
-- P:grouped: leased, its lease run out and not requeued yet wherever its entry is on the
-- processing list, or cancelled while leased) leaves its group's count, once.

-- How far from either end of the processing list an id is looked for. (As a string: the server
-- formats a number argument with printf on every call.)
local NEAR = '64'

-- Complete the items ids (a list of ids) of queue q. Returns, per id, 1 when this call deleted
-- its data key (it completed the item) and 0 when the item had already been completed (or had
-- expired). Its reads and type checks come before its first write.
local function finish(q, ids)
  local items, leases, near = {}, {}, {}
  for j, id in ipairs(ids) do
    items[j] = q.item .. id
    leases[j] = q.lease .. id
  end
  -- Which ids are near the oldest end: a look per id for one item, one read of that end (as
  -- long as the batch, and NEAR more) for a batch. Either fails, before any write, on a
  -- processing list of the wrong type. trim: the batch's ids, as many times as it names each,
  -- are the oldest entries.
  local trim = false
  if #ids == 1 then
    near[1] = redis.call('LPOS', q.processing, ids[1], 'RANK', '-1', 'MAXLEN', NEAR)
  else
    local window = redis.call('LRANGE', q.processing, -(#ids + NEAR), '-1')
    local oldest, left = {}, {}
    for _, entry in ipairs(window) do
      oldest[entry] = true
    end
    for j, id in ipairs(ids) do
      near[j] = oldest[id]
      left[id] = (left[id] or 0) + 1
    end
    if #window >= #ids then
      trim = true
      for k = #window - #ids + 1, #window do
        local entry = window[k]
        if not left[entry] or left[entry] == 0 then
          trim = false
          break
        end
        left[entry] = left[entry] - 1
      end
    end
  end
  -- The leases and delays of all the items at once (a lease key of another type reads as none
  -- and is left alone).
  local held = redis.call('MGET', unpack(leases))
  -- doomed: the keys the call deletes, in one DEL (every live lease, then the data keys).
  local delayed, doomed = {}, {}
  for j, value in ipairs(held) do
    if value then
      doomed[#doomed + 1] = leases[j]
    end
    if value == DELAY_TOKEN then
      delayed[#delayed + 1] = ids[j]
    end
  end
  -- Every key the call may write is checked before its first write. The data keys' checks tell
  -- which items exist too (their SIZES; an empty one reads as none: EXISTS then tells), so that
  -- they and the leases go in one DEL; an id named twice is completed once.
  -- The failure reasons and the groups' hash, which a queue holds only while it uses them, are
  -- probed in one read (unless the caller did). The delivery counts are checked by their drop,
  -- the first write (below), but where events read them first.
  local sets = #delayed > 0 and {q.delayed} or {}
  if SIZES[q.reasons] == nil or SIZES[q.grouped] == nil then
    probe(q, 'reasons', 'grouped')
  end
  local drop_first = not q.event_cap
  local hashes = drop_first and {q.reasons, q.counts, q.grouped}
    or {q.deliveries, q.reasons, q.counts, q.grouped}
  check_types('string', items, 'hash', hashes, 'zset', sets)
  local groups, flying = groups_of(q, ids)
  local some = false
  for j = 1, #ids do
    some = some or groups[j]
  end
  if some then
    check_types('list', {q.groups, q.queue}, 'hash', {q.groups_state})
    check_wake(q)
  end
  local done, gone, completed = {}, {}, 0
  for j, key in ipairs(items) do
    done[j] = 0
    if not gone[key] and (SIZES[key] > 0 or redis.call('EXISTS', key) == 1) then
      gone[key] = true
      done[j] = 1
      completed = completed + 1
      doomed[#doomed + 1] = key
    end
  end
  if drop_first then
    -- The delivery counts go first: a hash of another type fails the call before any write
    -- (with the error that names it; any other error is raised as it is).
    if type(redis.pcall('HDEL', q.deliveries, unpack(ids))) == 'table' then
      check_types('hash', {q.deliveries})
      redis.call('HDEL', q.deliveries, unpack(ids))
    end
  end
  if trim then
    -- The batch's entries, the oldest #ids, at once.
    redis.call('LTRIM', q.processing, '0', -(#ids + 1))
  else
    for j, id in ipairs(ids) do
      if near[j] then
        redis.call('LREM', q.processing, '-1', id)
      elseif #ids > 1 or redis.call('LPOS', q.processing, id, 'MAXLEN', NEAR) then
        redis.call('LREM', q.processing, '1', id)
      end
    end
  end
  if #delayed > 0 then
    redis.call('ZREM', q.delayed, unpack(delayed))
  end
  if #doomed > 0 then
    redis.call('DEL', unpack(doomed))
  end
  -- The delivery counts of the events, read before they are dropped.
  local deliveries = {}
  if q.event_cap and SIZES[q.deliveries] ~= 0 then
    deliveries = redis.call('HMGET', q.deliveries, unpack(ids))
  end
  -- (A bookkeeping hash found empty by the checks has nothing to drop.)
  if not drop_first and SIZES[q.deliveries] ~= 0 then
    redis.call('HDEL', q.deliveries, unpack(ids))
  end
  if SIZES[q.reasons] ~= 0 then
    redis.call('HDEL', q.reasons, unpack(ids))
  end
  local grouped = {}
  for j, id in ipairs(ids) do
    local g = groups[j]
    if g then
      grouped[#grouped + 1] = id
      if flying[j] then
        group_done(q, g)
      end
    end
  end
  if #grouped > 0 then
    redis.call('HDEL', q.grouped, unpack(grouped))
  end
  count(q, 'completed', completed)
  if q.event_cap then
    for j, id in ipairs(ids) do
      if done[j] == 1 then
        emit(q, 'completed', id, deliveries[j] or nil)
      end
    end
  end
  return done
end

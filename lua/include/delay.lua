-- delay: delayed items. A delayed item is in P:delayed and keeps a lease key whose value is
-- DELAY_TOKEN (see queue.lua) until a minute after it is due, so that a cleaner of another
-- implementation (which requeues unleased items that are in neither list) leaves it alone.
--#include queue.lua
--#include wake.lua
--#include group.lua
-- Keys: P:delayed, P:lease:<id>, the main queue (and, through wake.lua, P:wake).
-- Defines: schedule, promote, next_due.
-- Keeps: a delayed item is in P:delayed with a delay lease, or it is queued (or leased).
local DELAY_GRACE_MS = 60000

-- Hold an item back until due (ms). When it falls due before any other delayed item and a worker
-- is blocked on the queue, that worker is woken so that it waits for the new due time: an empty
-- id (never an item's id, so every client drops it when met) is pushed onto the main queue for a
-- worker blocked on this queue alone (when it is empty: only then can one be blocked on it), and a
-- token onto the wake list. The caller checks the
-- delayed set, the item's lease key, the main queue and the wake list beforehand.
local function schedule(q, id, due, now)
  local head = redis.call('ZRANGE', q.delayed, 0, 0, 'WITHSCORES')
  redis.call('ZADD', q.delayed, due, id)
  redis.call('SET', q.lease .. id, DELAY_TOKEN, 'PX', math.max(due - now, 1) + DELAY_GRACE_MS)
  if (not head[2] or tonumber(head[2]) > due) and redis.call('EXISTS', q.waiting) == 1 then
    -- A worker blocked on the main queue alone waits only while it is empty.
    if redis.call('LLEN', q.queue) == 0 then
      redis.call('LPUSH', q.queue, '')
    end
    wake(q)
  end
end

-- Move up to budget due items, soonest first, to the leasing end of the main queue; returns how
-- many were due. An item whose delay lease lapsed (nothing promoted it for a minute after it was
-- due) is queued too, unless a cleaner of another implementation queued it meanwhile (or a worker
-- leased it: then it has a lease again). Its first call reads the delayed set, and the leases are
-- read before anything is written (a lease key of another type reads as none and is left alone);
-- the caller checks the lists and the wake list (check_wake) beforehand, or, with unchecked, the
-- processing list only: promote then checks the main queue and the wake list before it writes.
local function promote(q, now, budget, unchecked)
  if SIZES[q.delayed] == 0 then -- known empty (probe)
    return 0
  end
  local due = redis.call('ZRANGEBYSCORE', q.delayed, '-inf', now, 'LIMIT', '0', budget)
  if #due == 0 then
    return 0
  end
  if unchecked then
    check_types('list', q.queue)
    check_wake(q)
  end
  if SIZES[q.grouped] == nil then
    check_groups(q)
    check_types('list', q.queue)
    check_wake(q)
  end
  local leases = {}
  for i, id in ipairs(due) do
    leases[i] = q.lease .. id
  end
  local values = redis.call('MGET', unpack(leases))
  for i = #due, 1, -1 do
    local id = due[i]
    redis.call('ZREM', q.delayed, id)
    local lease = leases[i]
    local held = values[i]
    if held == DELAY_TOKEN then
      redis.call('DEL', lease)
      held = false
    elseif not held then
      held = redis.call('LPOS', q.queue, id) or redis.call('LPOS', q.processing, id)
    end
    if not held and redis.call('EXISTS', q.item .. id) == 1 then
      requeue(q, id, true)
    end
  end
  return #due
end

-- Milliseconds until the next delayed item is due, or -1 when none is delayed.
local function next_due(q, now)
  if SIZES[q.delayed] == 0 then -- known empty (probe; nothing here delays an item)
    return -1
  end
  local head = redis.call('ZRANGE', q.delayed, 0, 0, 'WITHSCORES')
  if head[2] then
    return math.max(tonumber(head[2]) - now, 0)
  end
  return -1
end

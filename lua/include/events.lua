-- events: the queue's event stream. With events on (WorkQueue(..., events=True)), every script
-- that changes an item appends one entry per change to P:events, in the same call: its kind
-- (added, leased, completed, failed, retried, dead, expired, requeued, cancelled, promoted), the
-- item's id, its delivery count (every kind but added, when the item has been delivered) and the
-- reason of a failure. The stream is capped near the queue's events_maxlen entries (XADD MAXLEN
-- ~). With events off, nothing is written.
--#include queue.lua
-- Keys: P:events (type-checked by check_types when events are on).
-- Defines: emit, delivery_of.
-- Keeps: a queue with events off writes no stream; an entry is written in the call that makes
-- the change it reports.

-- Append one event of queue q (a no-op with events off). delivery and reason may be nil.
local function emit(q, kind, id, delivery, reason)
  if not q.event_cap then
    return
  end
  local fields = {'kind', kind, 'id', id}
  if delivery then
    fields[#fields + 1] = 'delivery'
    fields[#fields + 1] = delivery
  end
  if reason and reason ~= '' then
    fields[#fields + 1] = 'reason'
    fields[#fields + 1] = reason
  end
  redis.call('XADD', q.events, 'MAXLEN', '~', q.event_cap, '*', unpack(fields))
end

-- The delivery count of id for its event, read from P:deliveries (nil: never delivered, or
-- events off: then nothing is read). The caller has type-checked P:deliveries, and reads it
-- before its own writes drop the count.
local function delivery_of(q, id)
  if not q.event_cap then
    return nil
  end
  return redis.call('HGET', q.deliveries, id) or nil
end

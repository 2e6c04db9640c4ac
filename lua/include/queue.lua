-- queue: the key names every queue-level script shares, and the steps of an item's life that
-- several scripts take (enqueue, take, bury, forget, schedule, promote).
-- A script works on one or more queues. Queue i (from 1) has
--   KEYS[8i-7] main queue (list), KEYS[8i-6] processing list,
--   KEYS[8i-5] delivery counts (hash id -> count), KEYS[8i-4] last reasons (hash id -> text),
--   KEYS[8i-3] dead-letter index (sorted set id -> ms buried), KEYS[8i-2] delayed items (sorted
--   set id -> ms due), KEYS[8i-1] the workers blocked on the queue (sorted set waiter id -> ms
--   its registration lapses), KEYS[8i] wake-up tokens for them (list)
--   ARGV[4i-3] item-key prefix, ARGV[4i-2] lease-key prefix, ARGV[4i-1] dead-letter key prefix,
--   ARGV[4i] max deliveries (0: no limit)
-- and the script's own arguments follow, from ARGV[4n+1] (see arg()).
-- A delayed item keeps a lease key whose value is DELAY_TOKEN until shortly after it is due, so
-- that a cleaner of another implementation (which requeues unleased items that are in neither
-- list) leaves it alone. A lease key's value is the holder's token followed by '@' and the time
-- it was leased, in ms.
local NQ = #KEYS / 8
local DELAY_TOKEN = 'delayed'
local DELAY_GRACE_MS = 60000
local WAKE_TOKENS = 16

local function queue_at(i)
  local k, a = 8 * (i - 1), 4 * (i - 1)
  return {
    queue = KEYS[k + 1], processing = KEYS[k + 2], deliveries = KEYS[k + 3],
    reasons = KEYS[k + 4], dead = KEYS[k + 5], delayed = KEYS[k + 6], waiting = KEYS[k + 7],
    wake = KEYS[k + 8], item = ARGV[a + 1], lease = ARGV[a + 2], dead_item = ARGV[a + 3],
    max = tonumber(ARGV[a + 4]), index = i,
  }
end

local Q = queue_at(1)

-- The script's own argument number n (after the queues' arguments).
local function arg(n)
  return ARGV[4 * NQ + n]
end

-- Raise WRONGTYPE before anything is written when one of the named keys of queue q holds
-- another Redis type (Redis does not roll back a script's writes).
local CHECK = {
  queue = 'LLEN', processing = 'LLEN', deliveries = 'HLEN', reasons = 'HLEN', dead = 'ZCARD',
  delayed = 'ZCARD', wake = 'LLEN',
}
local function guard(q, ...)
  for _, name in ipairs({...}) do
    redis.call(CHECK[name], q[name])
  end
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function delivered(q, id)
  return tonumber(redis.call('HGET', q.deliveries, id) or '0')
end

-- Drop an item's bookkeeping (its delivery count and last reason).
local function forget(q, id)
  redis.call('HDEL', q.deliveries, id)
  redis.call('HDEL', q.reasons, id)
end

-- Wake the workers blocked on several queues, if any is waiting on this one.
local function wake(q)
  if redis.call('EXISTS', q.waiting) == 1 then
    redis.call('LPUSH', q.wake, '1')
    redis.call('LTRIM', q.wake, 0, WAKE_TOKENS - 1)
  end
end

-- Register a blocked worker until ms until_ms.
local function await(q, waiter, until_ms)
  redis.call('ZADD', q.waiting, until_ms, waiter)
end

-- A worker stops waiting (waiter may be ''); lapsed registrations go too, and the wake list goes
-- with the last waiter.
local function leave(q, waiter, now)
  if waiter ~= '' then
    redis.call('ZREM', q.waiting, waiter)
  end
  redis.call('ZREMRANGEBYSCORE', q.waiting, '-inf', now)
  if redis.call('EXISTS', q.waiting) == 0 then
    redis.call('DEL', q.wake)
  end
end

-- Push an id onto the main queue: at the back of the line, or (next) at the leasing end.
local function enqueue(q, id, next)
  redis.call(next and 'RPUSH' or 'LPUSH', q.queue, id)
  wake(q)
end

-- Move an item to the dead-letter store: its data, delivery count and reason are kept under
-- a key outside <prefix>:item:*, so no cleaner of any implementation brings it back.
local function bury(q, id, data, deliveries, reason, now)
  local key = q.dead_item .. id
  redis.call('DEL', key)
  redis.call('HSET', key, 'data', data, 'deliveries', deliveries, 'reason', reason or '')
  redis.call('ZADD', q.dead, now, id)
  redis.call('DEL', q.item .. id, q.lease .. id)
  forget(q, id)
end

-- Hold an item back until due (ms). When it falls due before any other delayed item and a
-- worker is blocked on the queue, that worker is woken so that it can wait for the new due time:
-- an empty id (never an item's id, so every client drops it when met) is pushed onto the main
-- queue for a worker blocked on this queue alone, and a token onto the wake list.
local function schedule(q, id, due, now)
  local head = redis.call('ZRANGE', q.delayed, 0, 0, 'WITHSCORES')
  redis.call('ZADD', q.delayed, due, id)
  redis.call('SET', q.lease .. id, DELAY_TOKEN, 'PX', math.max(due - now, 1) + DELAY_GRACE_MS)
  if (not head[2] or tonumber(head[2]) > due) and redis.call('EXISTS', q.waiting) == 1 then
    redis.call('LPUSH', q.queue, '')
    wake(q)
  end
end

-- Move up to budget due items, soonest first, to the leasing end of the main queue.
local function promote(q, now, budget)
  local due = redis.call('ZRANGEBYSCORE', q.delayed, '-inf', now, 'LIMIT', 0, budget)
  for i = #due, 1, -1 do
    local id = due[i]
    redis.call('ZREM', q.delayed, id)
    local lease = q.lease .. id
    if redis.call('GET', lease) == DELAY_TOKEN then
      redis.call('DEL', lease)
      if redis.call('EXISTS', q.item .. id) == 1 then
        enqueue(q, id, true)
      end
    end
  end
end

-- Milliseconds until the next delayed item is due, or -1 when none is delayed.
local function next_due(q, now)
  local head = redis.call('ZRANGE', q.delayed, 0, 0, 'WITHSCORES')
  if head[2] then
    return math.max(tonumber(head[2]) - now, 0)
  end
  return -1
end

-- Hand out an id that has just been taken off the main queue (data: its data key's value, read
-- before the id was taken, so that a wrong type fails before any write): returns
-- {queue index, id, data, deliveries, ms leased}, or nil when the id is not an item any more,
-- is a stray copy of a leased item, or has been delivered max times (it is then buried). With
-- once, the item is removed as it is handed out (at most once); otherwise it is leased for ms
-- with the lease value token@now.
local function take(q, id, data, ms, token, once, now)
  if not data then
    forget(q, id)
    return nil
  end
  local lease = q.lease .. id
  if redis.call('EXISTS', lease) == 1 then
    return nil
  end
  local n = delivered(q, id)
  if q.max > 0 and n >= q.max then
    bury(q, id, data, n, redis.call('HGET', q.reasons, id), now)
    return nil
  end
  n = n + 1
  if once then
    redis.call('DEL', q.item .. id)
    forget(q, id)
  else
    redis.call('HSET', q.deliveries, id, n)
    redis.call('SET', lease, token .. '@' .. now, 'PX', ms)
  end
  return {q.index, id, data, n, now}
end

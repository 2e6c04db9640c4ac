-- queue: the key names every queue-level script shares, and the steps of an item's life that
-- several scripts take (lease, bury, forget, schedule, promote).
-- KEYS[1] main queue (list), KEYS[2] processing list, KEYS[3] delivery counts (hash id -> count),
-- KEYS[4] last reasons (hash id -> text), KEYS[5] dead-letter index (sorted set id -> ms buried),
-- KEYS[6] delayed items (sorted set id -> ms due)
-- ARGV[1] item-key prefix, ARGV[2] lease-key prefix, ARGV[3] dead-letter key prefix
-- A delayed item keeps a lease key whose value is DELAY_TOKEN until shortly after it is due, so
-- that a cleaner of another implementation (which requeues unleased items that are in neither
-- list) leaves it alone.
local Q = {
  queue = KEYS[1], processing = KEYS[2], deliveries = KEYS[3], reasons = KEYS[4],
  dead = KEYS[5], delayed = KEYS[6],
  item = ARGV[1], lease = ARGV[2], dead_item = ARGV[3],
}
local DELAY_TOKEN = 'delayed'
local DELAY_GRACE_MS = 60000

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function delivered(id)
  return tonumber(redis.call('HGET', Q.deliveries, id) or '0')
end

-- Drop an item's bookkeeping (its delivery count and last reason).
local function forget(id)
  redis.call('HDEL', Q.deliveries, id)
  redis.call('HDEL', Q.reasons, id)
end

-- Move an item to the dead-letter store: its data, delivery count and reason are kept under
-- a key outside <prefix>:item:*, so no cleaner of any implementation brings it back.
local function bury(id, data, deliveries, reason, now)
  local key = Q.dead_item .. id
  redis.call('DEL', key)
  redis.call('HSET', key, 'data', data, 'deliveries', deliveries, 'reason', reason or '')
  redis.call('ZADD', Q.dead, now, id)
  redis.call('DEL', Q.item .. id, Q.lease .. id)
  forget(id)
end

-- Hold an item back until due_ms.
local function schedule(id, due, now)
  redis.call('ZADD', Q.delayed, due, id)
  redis.call('SET', Q.lease .. id, DELAY_TOKEN, 'PX', math.max(due - now, 1) + DELAY_GRACE_MS)
end

-- Move up to budget due items to the leasing end of the main queue.
local function promote(now, budget)
  local due = redis.call('ZRANGEBYSCORE', Q.delayed, '-inf', now, 'LIMIT', 0, budget)
  for _, id in ipairs(due) do
    redis.call('ZREM', Q.delayed, id)
    local lease = Q.lease .. id
    if redis.call('GET', lease) == DELAY_TOKEN then
      redis.call('DEL', lease)
      if redis.call('EXISTS', Q.item .. id) == 1 then
        redis.call('RPUSH', Q.queue, id)
      end
    end
  end
end

-- Milliseconds until the next delayed item is due, or -1 when none is delayed.
local function next_due(now)
  local head = redis.call('ZRANGE', Q.delayed, 0, 0, 'WITHSCORES')
  if head[2] then
    return math.max(tonumber(head[2]) - now, 0)
  end
  return -1
end

-- Hand out an id that has just been taken off the main queue: returns {id, data, deliveries},
-- or nil when the id is not an item any more, is a stray copy of a leased item, or has been
-- delivered max times (it is then buried). With once, the item is removed as it is handed
-- out (at most once); otherwise it is leased for ms with token.
local function take(id, ms, token, max, once, now)
  local data = redis.call('GET', Q.item .. id)
  if not data then
    forget(id)
    return nil
  end
  local lease = Q.lease .. id
  if redis.call('EXISTS', lease) == 1 then
    return nil
  end
  local n = delivered(id)
  if max > 0 and n >= max then
    bury(id, data, n, redis.call('HGET', Q.reasons, id), now)
    return nil
  end
  n = n + 1
  if once then
    redis.call('DEL', Q.item .. id)
    forget(id)
  else
    redis.call('HSET', Q.deliveries, id, n)
    redis.call('SET', lease, token, 'PX', ms)
  end
  return {id, data, n}
end

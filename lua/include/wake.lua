-- wake: blocked workers. A worker about to block registers in P:waiting (see lease.lua); every
-- push onto a queue with a registered worker also pushes a wake-up token onto P:wake, which a
-- worker blocked on several queues waits for (a token carries no item); n items wake up to n
-- workers. Both keys expire when the last registration lapses.
--#include queue.lua
-- Keys: P:waiting, P:wake, the main queue (enqueue) and P:processing (drop_marker).
-- Defines: wake, join, drop_marker, check_wake, enqueue, leave.
-- Keeps: the waiting set and the wake list expire with the last registration.
local WAKE_TOKENS = 16
local WAKE_LAST = '15' -- WAKE_TOKENS - 1

local function wake(q, n)
  -- check_wake's reading, when nothing of this call has changed the waiting set since.
  local left = rawget(q, 'waiting_pttl') or redis.call('PTTL', q.waiting)
  if left ~= -2 then
    for _ = 1, math.min(n or 1, WAKE_TOKENS) do
      redis.call('LPUSH', q.wake, '1')
    end
    -- (As strings: the server formats a number argument with printf.)
    redis.call('LTRIM', q.wake, '0', WAKE_LAST)
    if left > 0 then
      -- The tokens go when the last registration lapses, as the waiting set does.
      redis.call('PEXPIRE', q.wake, left)
    end
  end
end

-- Register a worker about to block for up to ms. The waiting set expires with its last
-- registration, so that workers killed while waiting leave nothing behind. The caller checks
-- the waiting set beforehand.
local function join(q, waiter, now, ms)
  q.waiting_pttl, SIZES[q.waiting] = nil, nil
  redis.call('ZADD', q.waiting, now + ms, waiter)
  if redis.call('PTTL', q.waiting) < ms then
    redis.call('PEXPIRE', q.waiting, ms)
  end
end

-- Drop the empty id that a worker of another implementation leaves on the processing list when
-- it takes a wake-up meant for ours (see schedule in delay.lua). It lands at the newest end, so
-- only the newest MARKER_LOOK entries are searched; every clean drops one that is further in.
-- While an item with the empty id exists (made by another client), the entry may be its own and
-- stays. The caller checks the processing list beforehand.
local MARKER_LOOK = 100
local function drop_marker(q)
  if redis.call('LPOS', q.processing, '', 'MAXLEN', MARKER_LOOK)
    and redis.call('EXISTS', q.item) == 0 then
    redis.call('LREM', q.processing, 1, '')
  end
end

-- Check, before a script's first write, the key that wake writes: the wake list, which is pushed
-- only while a worker is registered. The waiting set's time to live is kept in q for wake (join
-- and leave, which change the set, drop it).
local function check_wake(q)
  -- (A waiting set known empty, as a probe finds it, has no time to live: PTTL's -2.)
  local left = SIZES[q.waiting] == 0 and -2 or redis.call('PTTL', q.waiting)
  if left ~= -2 then
    check_types('list', q.wake)
  end
  q.waiting_pttl = left
end

-- Push an id onto the main queue: at the back of the line, or (next) at the leasing end, where it
-- takes the place of a wake-up entry (see wakeups in queue.lua): a wake-up still there woke no
-- worker, as none can be blocked on a queue that holds an entry.
local function enqueue(q, id, next)
  if next and wakeups(q) == 1 then
    redis.call('LSET', q.queue, -1, id)
  else
    redis.call(next and 'RPUSH' or 'LPUSH', q.queue, id)
  end
  wake(q)
end

-- A worker stops waiting (waiter may be ''); lapsed registrations go too, and the wake list goes
-- with the last waiter.
local function leave(q, waiter, now)
  q.waiting_pttl, SIZES[q.waiting] = nil, nil
  if waiter ~= '' then
    redis.call('ZREM', q.waiting, waiter)
  end
  redis.call('ZREMRANGEBYSCORE', q.waiting, '-inf', now)
  if redis.call('EXISTS', q.waiting) == 0 then
    redis.call('DEL', q.wake)
  end
end

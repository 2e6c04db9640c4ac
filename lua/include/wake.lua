-- wake: blocked workers. A worker about to block registers in P:waiting (see lease.lua); every
-- push onto a queue with a registered worker also pushes a wake-up token onto P:wake, which a
-- worker blocked on several queues waits for (a token carries no item); n items wake up to n
-- workers.
local WAKE_TOKENS = 16

local function wake(q, n)
  if redis.call('EXISTS', q.waiting) == 1 then
    for _ = 1, math.min(n or 1, WAKE_TOKENS) do
      redis.call('LPUSH', q.wake, '1')
    end
    redis.call('LTRIM', q.wake, 0, WAKE_TOKENS - 1)
  end
end

-- Check, before a script's first write, the key that wake writes: the wake list, which is pushed
-- only while a worker is registered.
local function check_wake(q)
  if redis.call('EXISTS', q.waiting) == 1 then
    check_types('list', {q.wake})
  end
end

-- Push an id onto the main queue: at the back of the line, or (next) at the leasing end.
local function enqueue(q, id, next)
  redis.call(next and 'RPUSH' or 'LPUSH', q.queue, id)
  wake(q)
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

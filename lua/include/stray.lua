-- stray: an id met on the main queue while its lease is live (take returned nil, true).
--#include queue.lua
--#include hold.lua
-- Keys: P:lease:<id> (read), P:processing.
-- Defines: watch.
-- Keeps: a live lease's id is on the processing list, so a cleaner requeues it when it expires.

-- Its holder may have leased it in separate commands (a client of another implementation) with
-- a clean requeueing it in between, so that it is on no processing list: it is pushed there
-- unless it is on it already, so that a cleaner requeues it when the lease expires. A delayed
-- item (its lease is the delay's) and an id held by a deep clean (which requeues it itself) are
-- only dropped. The caller checks the processing list beforehand.
local function watch(q, id)
  local held = redis.pcall('GET', q.lease .. id)
  if type(held) == 'string' and held ~= DELAY_TOKEN and not is_hold(held)
    and not redis.call('LPOS', q.processing, id) then
    redis.call('LPUSH', q.processing, id)
  end
end

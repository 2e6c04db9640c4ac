-- group_set: set or declare the group concurrency of the fleet or the rate limit of every group,
-- set a group's own rate limit, or pause or resume a group (see group.lua).
--#include queue.lua
--#include wake.lua
--#include group.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) mode: 'cap' to set the cap, 'declare' to set it only when none was ever set, 'pause'
--   or 'resume' to pause or resume a group; 'rate' to set or remove a group's own rate limit,
--   'rate_all' to set the rate limit of every group, 'rate_declare' to set it only when none was
--   ever set
-- arg(2) value: the cap, items of one group in flight (0: none), the group's name, or with
--   'rate_all' and 'rate_declare' the limit, 'count per_ms burst' ('0': none)
-- arg(3) limit (optional): with 'rate', the group's limit, 'count per_ms burst' ('': none of its own)
-- Returns 1 when the state was written (a group paused or resumed that was not already), 0
-- when a declaration found a cap or limit set already or nothing changed.
-- Keeps: a paused group leaves the ring at its next turn and hands out nothing; a resumed one
-- enters it again at once when it has ready items and is below its cap; a group held at a cap
-- that is raised comes back at its next completion; a group waiting out its rate limit comes back
-- at once when its own limit is set or removed (one of every group's applies from the next turn,
-- or once the group's clock lets it come back). Every key the call may write is
-- type-checked before its first write. A declaration comes just before a lease, so it also
-- checks every key of the queue that the lease may write (but the per-item ones), as set_rate.lua
-- does: a lease that fails on a wrong type fails here first, unchanged.
local mode, value = arg(1), arg(2)
check_types('hash', {Q.groups_state})
if mode == 'declare' or mode == 'rate_declare' then
  check_types('list', {Q.queue, Q.processing, Q.wake, Q.groups}, 'hash', {Q.deliveries, Q.reasons,
    Q.counts, Q.grouped, Q.rate}, 'zset', {Q.delayed, Q.dead, Q.waiting, Q.groups_backlog,
    Q.groups_paced})
end
if mode == 'cap' or mode == 'declare' then
  if mode == 'declare' and redis.call('HGET', Q.groups_state, 'cap') then
    return 0
  end
  redis.call('HSET', Q.groups_state, 'cap', value)
  return 1
end
if mode == 'rate_all' or mode == 'rate_declare' then
  if mode == 'rate_declare' and redis.call('HGET', Q.groups_state, 'rate') then
    return 0
  end
  if value == '0' and SIZES[Q.groups_state] == 0 then
    return 1
  end
  redis.call('HSET', Q.groups_state, 'rate', value)
  return 1
end
if mode == 'pause' then
  return redis.call('HSET', Q.groups_state, 'p:' .. value, '1')
end
check_types('list', {Q.groups, Q.queue})
check_wake(Q)
if mode == 'rate' then
  -- A group waiting out its old limit comes back to the ring (its turn checks the new one).
  local spec, changed = arg(3), 1
  if spec == '' then
    changed = redis.call('HDEL', Q.groups_state, 'r:' .. value)
  else
    redis.call('HSET', Q.groups_state, 'r:' .. value, spec)
  end
  if redis.call('HGET', Q.groups_state, 'q:' .. value) == 'w' then
    redis.call('HDEL', Q.groups_state, 'q:' .. value)
    group_enter(Q, value)
  end
  return changed
end
if redis.call('HDEL', Q.groups_state, 'p:' .. value) == 0 then
  return 0
end
group_enter(Q, value)
return 1

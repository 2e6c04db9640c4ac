-- renew: extend a lease, only for the worker that holds it.
--#include cancelled.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) item_id: the item's id
-- arg(2) token: the lease value the caller holds
-- arg(3) lease_ms: the new lease length in ms (from now)
-- Returns 1 when the lease was extended; 2 when the item was cancelled while the caller held it
-- (cancel.lua marked the lease: nothing changed); 0 when the caller does not hold it (it
-- expired, or another worker holds it now): then nothing changed.
-- Keeps: a worker can only ever act on its own lease; the lease key is read (GET fails on another
-- type) before it is written. It names the lease key from the layout as queue.lua does, without
-- queue.lua's definitions: a renewal is one read and one write, and runs nothing else.
local LEASE = '' --#layout lease
local lease = ARGV[1] .. LEASE .. ARGV[2]
local held = redis.call('GET', lease)
if held == ARGV[3] then
  redis.call('PEXPIRE', lease, ARGV[4])
  return 1
end
if held == CANCEL_PREFIX .. ARGV[3] then
  return 2
end
return 0

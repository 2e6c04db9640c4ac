-- renew: extend a lease, only for the worker that holds it.
-- KEYS[1] the item's lease key
-- ARGV[1] lease token, ARGV[2] new lease length in ms (from now)
-- Returns 1 when the lease was extended, 0 when the caller does not hold it (it expired, or
-- another worker holds it now); then nothing changed.
-- Keeps: a worker can only ever act on its own lease; the lease key is read (GET fails on another
-- type) before it is written.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0

-- state: where each of some items is (queued, delayed, leased, expired, dead or gone), by id.
--#include queue.lua
--#include hold.lua
--#include cancelled.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) result_bytes: the most bytes of a kept result to return, or -1 for the whole result
-- arg(2...) ids: the items' ids
-- Returns, per id, {state, deliveries, lease value, lease ms left, ms due, reason, cancelled,
-- progress, result, result size}: state is 'queued', 'delayed', 'leased', 'expired', 'dead', 'completed' or
-- 'gone'; the lease value is false and the time left -1 without a live lease; ms due is -1
-- unless the item is delayed; reason is the last failure's (a dead letter's own), or false;
-- cancelled is 1 for an item cancelled while leased whose marked lease has not run out
-- (cancel.lua), else 0; progress is a leased item's last report, or false; result is a completed
-- item's kept result (complete_result.lua; its first arg(1) bytes at most), or false, and the
-- length of the whole result (0 when there is none).
-- Keeps: read only. Each id costs a fixed number of O(1) reads (EXISTS, GET, PTTL, ZSCORE, HGET,
-- HMGET, LINDEX of a one-entry list), whatever the queue's length, except one: an item that exists,
-- has been delivered and has no lease is looked for on the processing list (LPOS), whose length is
-- the number of items leased or awaiting a clean, to tell an expired lease from an item queued
-- again. An item never delivered by this library has no delivery count and reads as queued without
-- that look.
local bound = tonumber(arg(1))
local out = {}
for i = NQ + 2, #ARGV do
  local id = ARGV[i]
  local state, deliveries, held, left, due, reason, cancelled = 'gone', 0, false, -1, -1, false, 0
  local progress, result, size = false, false, 0
  if redis.call('EXISTS', Q.item .. id) == 1 then
    local lease = Q.lease .. id
    held = redis.call('GET', lease) or false
    deliveries = delivered(Q, id)
    reason = redis.call('HGET', Q.reasons, id) or false
    local at = redis.call('ZSCORE', Q.delayed, id)
    if at and (not held or held == DELAY_TOKEN) then
      state, due, held = 'delayed', tonumber(at), false
    elseif held == DELAY_TOKEN then
      -- A delay lease that outlived its entry: the item is queued (or about to be).
      state, held = 'queued', false
    elseif held and not is_hold(held) then
      state, left = 'leased', redis.call('PTTL', lease)
      progress = redis.call('GET', Q.progress .. id) or false
    elseif held then
      -- Held by a deep clean, which queues it: it is waiting to be leased.
      state, held = 'queued', false
    elseif deliveries > 0 and redis.call('LPOS', Q.processing, id) then
      state = 'expired'
    else
      state = 'queued'
    end
  elseif redis.call('ZSCORE', Q.dead, id) then
    local h = redis.call('HMGET', Q.dead_item .. id, 'deliveries', 'reason')
    state, deliveries = 'dead', tonumber(h[1] or '0')
    reason = h[2] or false
    if reason == '' then
      reason = false
    end
  else
    local kept = redis.call('LINDEX', Q.result .. id, 0)
    if kept and string.sub(kept, 1, 1) == 'c' then
      size = #kept - 1
      state, result = 'completed', string.sub(kept, 2, bound >= 0 and bound + 1 or -1)
    end
    local mark = redis.call('GET', Q.lease .. id)
    if mark and string.sub(mark, 1, #CANCEL_PREFIX) == CANCEL_PREFIX then
      cancelled = 1
    end
  end
  out[#out + 1] = {state, deliveries, held, left, due, reason, cancelled, progress, result, size}
end
return out

-- cancelled: the mark a cancel leaves on a leased item's lease key (see cancel.lua).
-- A cancelled leased item's data is gone at once; its lease key keeps its time to live with its
-- value prefixed by CANCEL_PREFIX, so that the holder's next renewal (renew.lua) tells it the item
-- was cancelled, and no other holder's token matches it.
-- Keys: P:lease:<id> (its value only).
-- Defines: CANCEL_PREFIX.
-- Keeps: a marked lease is still a lease for every cleaner (it keeps the id from being queued),
-- and it lapses as the lease would have.
local CANCEL_PREFIX = 'cancelled:'

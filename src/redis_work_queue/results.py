"""What the queue operations return: plain frozen records, and the outcome of a release."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from .item import Item


@dataclass(frozen=True)
class QueueStats:
    """A queue's counts (as of one moment per field; they are read in bounded steps).

    Attributes:
        queued: Ids in the main queue, waiting to be leased.
        leased: Items on the processing list with a live lease.
        expired: Items on the processing list whose lease is gone: awaiting a light clean.
        delayed: Items held back until a due time.
        dead: Items in the dead-letter store.
    """

    queued: int
    leased: int
    expired: int
    delayed: int
    dead: int


@dataclass(frozen=True)
class QueuedItem:
    """An item waiting in the main queue, as seen by :meth:`WorkQueue.peek`.

    Attributes:
        position: 0 for the next item to be leased, 1 for the one after, and so on.
        id: The item's id.
        data: Its data, or None when the id is a leftover of an item that no longer exists.
    """

    position: int
    id: str
    data: bytes | None


@dataclass(frozen=True)
class PendingItem:
    """An entry of the processing list, as seen by :meth:`WorkQueue.pending`.

    Attributes:
        id: The item's id.
        deliveries: How many times it has been handed out.
        leased_at: When the current lease was taken (seconds since the epoch), when known.
        lease_left: Seconds left on the lease; None when the lease is gone (expired, awaiting a
            light clean).
        lease_token: The current lease value, or None.
    """

    id: str
    deliveries: int
    leased_at: float | None
    lease_left: float | None
    lease_token: str | None

    @property
    def expired(self) -> bool:
        """True when the lease is gone and the item awaits a light clean."""
        return self.lease_left is None


@dataclass(frozen=True)
class FlushReport:
    """What a flush removed.

    Attributes:
        keys: How many keys were deleted in all.
        items: How many of them were item data keys.
    """

    keys: int
    items: int


@dataclass(frozen=True)
class DeadLetter:
    """An item that was delivered ``max_deliveries`` times without being completed.

    Attributes:
        id: The item's id.
        data: The item's data.
        deliveries: How many times it was handed out.
        reason: The reason given with its last release, or ``"lease expired"``.
        died_at: When it was moved to the dead-letter store (seconds since the epoch).
    """

    id: str
    data: bytes
    deliveries: int
    reason: str
    died_at: float

    def item(self) -> Item:
        """The dead letter as an :class:`Item` (same id and data)."""
        return Item(self.data, id=self.id)


class Released(IntEnum):
    """What a release did (the reply of ``lua/release.lua``)."""

    #: The caller did not hold the lease (or the item no longer exists): nothing changed.
    NOT_HELD = 0
    #: The item went back to the queue, or to the delayed set for a retry.
    REQUEUED = 1
    #: It was on its last allowed delivery: it went to the dead letters instead.
    BURIED = 2


@dataclass(frozen=True)
class QueueCounts:
    """A queue's counters, kept in Redis by the scripts in ``<prefix>:counts``.

    Each is an integer count of items since the queue's first write or its last flush, zero
    when never counted.

    Attributes:
        added: Items added.
        completed: Items completed.
        failed: Items released with a failure (retried or buried).
        retried: Items put back for another delivery after a failure or an expired lease.
        dead: Items moved to the dead letters.
        expired: Leases found expired by a clean.
        requeued: Dead letters put back in the queue.
    """

    added: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    dead: int = 0
    expired: int = 0
    requeued: int = 0

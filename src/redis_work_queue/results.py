"""What the queue operations return: plain frozen records, and the outcome of a release."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any, TypeVar

from .errors import InvalidArgumentError
from .flow import GroupStats, RateLimit
from .item import Item

R = TypeVar("R")


@dataclass(frozen=True)
class QueueStats:
    """A queue's counts (as of one moment per field; they are read in bounded steps).

    Attributes:
        queued: Ids in the main queue, waiting to be leased.
        leased: Items on the processing list with a live lease.
        expired: Items on the processing list whose lease is gone: awaiting a light clean.
        delayed: Items held back until a due time.
        dead: Items in the dead-letter store.
        rate_limit: The queue's rate limit as kept in Redis (see ``set_rate_limit``), or None.
        grouped: Items waiting on their groups' lists, to be leased in their groups' turns
            (``queued`` counts the main queue only).
        group_concurrency: The cap on the items of one group in flight, as kept in Redis (see
            ``set_group_concurrency``), or None.
        groups: The counts of each group asked for with ``stats(groups=...)``, by name.
        groups_waiting: How many groups have items waiting on their lists (paused ones
            among them).
        top_groups: With ``stats(top_groups=N)``, the counts of the N groups with the most
            items waiting, by name, most first (ties in reverse order of name).
        group_rate_limit: The rate limit of every group, as kept in Redis (see
            ``set_default_group_rate_limit``), or None.
    """

    queued: int
    leased: int
    expired: int
    delayed: int
    dead: int
    rate_limit: RateLimit | None = None
    grouped: int = 0
    group_concurrency: int | None = None
    groups: dict[str, GroupStats] = field(default_factory=dict)
    groups_waiting: int = 0
    top_groups: dict[str, GroupStats] = field(default_factory=dict)
    group_rate_limit: RateLimit | None = None


#: A record's ``size`` when it is not given: the length of its ``data``.
SIZE_OF_DATA = -1


class Previewed:
    """What a listed item with a data preview shares: its ``data`` and ``size``.

    ``size`` is the length of the item's whole data, or None when there is none (``data`` is
    None: the id is a leftover of an item that no longer exists); when not given, the length of
    ``data``.
    """

    data: bytes | None
    size: int | None

    def __post_init__(self) -> None:
        if self.size == SIZE_OF_DATA:
            object.__setattr__(self, "size", None if self.data is None else len(self.data))

    @property
    def truncated(self) -> bool:
        """True when ``data`` is a preview: a part of the item's data only."""
        return self.data is not None and self.size is not None and self.size > len(self.data)


@dataclass(frozen=True)
class QueuedItem(Previewed):
    """An item waiting in the main queue, as seen by :meth:`WorkQueue.peek`.

    Attributes:
        position: 0 for the next item to be leased, 1 for the one after, and so on.
        id: The item's id.
        data: Its data (its first ``preview_bytes`` bytes when the peek asked for a preview), or
            None when the id is a leftover of an item that no longer exists.
        size: The length of its whole data in bytes, or None when there is none; when not
            given, the length of ``data``.
    """

    position: int
    id: str
    data: bytes | None
    size: int | None = SIZE_OF_DATA


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
        data: The item's data (its first ``preview_bytes`` bytes when the listing asked for a
            preview).
        deliveries: How many times it was handed out.
        reason: The reason given with its last release, or ``"lease expired"``.
        died_at: When it was moved to the dead-letter store (seconds since the epoch).
        size: The length of its whole data in bytes; when not given, the length of ``data``.
    """

    id: str
    data: bytes
    deliveries: int
    reason: str
    died_at: float
    size: int = SIZE_OF_DATA

    def __post_init__(self) -> None:
        if self.size == SIZE_OF_DATA:
            object.__setattr__(self, "size", len(self.data))

    @property
    def truncated(self) -> bool:
        """True when ``data`` is a preview: a part of the dead letter's data only."""
        return self.size > len(self.data)

    def item(self) -> Item:
        """The dead letter as an :class:`Item` (same id and data).

        Raises:
            InvalidArgumentError: ``data`` is a preview (see :attr:`truncated`): read the whole
                data with ``item_data(db, id, dead=True)``, or list the dead letters without
                ``preview_bytes``.
        """
        if self.truncated:
            raise InvalidArgumentError(
                f"dead letter {self.id!r} was read with preview_bytes: its data holds "
                f"{len(self.data)} of {self.size} bytes. Read it whole with "
                "item_data(db, id, dead=True), or dead_letters() without preview_bytes"
            )
        return Item(self.data, id=self.id)


class Released(IntEnum):
    """What a release did (the reply of ``lua/release.lua``)."""

    #: The caller did not hold the lease (or the item no longer exists): nothing changed.
    NOT_HELD = 0
    #: The item went back to the queue, or to the delayed set for a retry.
    REQUEUED = 1
    #: It was on its last allowed delivery: it went to the dead letters instead.
    BURIED = 2


class Cancelled(IntEnum):
    """What a cancel did (the reply of ``lua/cancel.lua``); false when nothing was cancelled."""

    #: No such item (dead, done, or never added): nothing changed.
    NOT_FOUND = 0
    #: It was waiting (queued, delayed, or its lease had run out): it is removed.
    REMOVED = 1
    #: It was leased: it is removed, and its holder's next renewal reports the cancellation
    #: (the worker runner then stops the handler as it stops one past its timeout).
    SIGNALLED = 2


class Renewed(IntEnum):
    """What a renewal did (the reply of ``lua/renew.lua``); true only when it was renewed."""

    #: The caller does not hold the lease (it ran out, or another worker holds the item).
    NOT_HELD = 0
    #: The lease was extended.
    RENEWED = 1
    #: The item was cancelled while the caller held it: stop working on it.
    CANCELLED = 2

    def __bool__(self) -> bool:
        return self is Renewed.RENEWED


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
        cancelled: Items cancelled by id (``cancel``).
    """

    added: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    dead: int = 0
    expired: int = 0
    requeued: int = 0
    cancelled: int = 0


@dataclass(frozen=True)
class CleanReport:
    """What one clean did.

    Attributes:
        examined: Ids looked at (light clean: processing-list entries; deep clean: data keys).
        requeued: Items pushed back onto the main queue.
        dropped: Ids removed from the processing list because their item no longer exists (or
            because they were a second entry of the same id).
        dead: Items moved to the dead-letter store: their lease expired on their last allowed
            delivery.
        forgotten: Items whose delivery count and reason were dropped because the item no longer
            exists.
    """

    examined: int = 0
    requeued: int = 0
    dropped: int = 0
    dead: int = 0
    forgotten: int = 0


@dataclass(frozen=True)
class CleanProgress:
    """How far a deep clean has got, as passed to its progress callback.

    Attributes:
        phase: The step running: ``scan``, ``walk``, ``hold``, ``recheck``, ``processing``,
            ``requeue``, ``forget``, then ``done``.
        examined: Data keys examined so far.
        requeued: Items requeued so far.
        dropped: Processing-list entries dropped so far.
        dead: Items moved to the dead-letter store so far.
        forgotten: Bookkeeping entries dropped so far.
        elapsed: Seconds since the clean started.
        longest_call: The most server time one call of the clean has taken, in seconds.
    """

    phase: str
    examined: int
    requeued: int
    dropped: int
    dead: int
    forgotten: int
    elapsed: float
    longest_call: float

    @property
    def rate(self) -> float:
        """Data keys examined per second."""
        return self.examined / self.elapsed if self.elapsed > 0 else 0.0


ProgressCallback = Callable[[CleanProgress], None]


@dataclass(frozen=True)
class WorkerInfo:
    """A live worker of a queue, as its last heartbeat described it.

    A registration is read defensively: a number that is missing, not finite or out of its
    range (another program wrote the hash, or it was edited by hand) is None (pid and times) or 0
    (counts), and a field that held such a number is named in ``unreadable``.

    Attributes:
        id: The worker's id (``host:pid:random``).
        host: The host it runs on.
        pid: Its process id, or None.
        queues: The queues it serves, highest priority first.
        started: When it started (Unix time, seconds), or None.
        beat: When it last beat (Unix time, seconds, server clock), or None.
        lapses: When its registration lapses unless it beats again (Unix time, seconds), or None.
        completed: Items it completed so far.
        failed: Items whose handler failed (timeouts included).
        lost: Items it lost (completed elsewhere, or whose lease it could not renew).
        unreadable: The fields that held something other than a number in range, sorted.
    """

    id: str
    host: str
    pid: int | None
    queues: tuple[str, ...]
    started: float | None
    beat: float | None
    lapses: float | None
    completed: int
    failed: int
    lost: int
    unreadable: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The worker as a JSON-ready dict (never NaN nor an infinity: those fields are None)."""
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "queues": list(self.queues),
            "started": self.started,
            "beat": self.beat,
            "lapses": self.lapses,
            "completed": self.completed,
            "failed": self.failed,
            "lost": self.lost,
            "unreadable": list(self.unreadable),
        }


def sum_fields(records: Sequence[R]) -> R:
    """The field-by-field sum of records of one dataclass.

    For a sharded queue's stats or counts from its shards'; a field that is not a number (the
    rate limit of stats) is the first record's, the home shard's.
    """
    kind = type(records[0])
    first = records[0]
    summed = {
        f.name: (
            sum(getattr(r, f.name) for r in records)
            if isinstance(getattr(first, f.name), int)
            else getattr(first, f.name)
        )
        for f in fields(kind)  # type: ignore[arg-type]
    }
    return kind(**summed)

"""Every queue operation, written once as a generator of Redis calls (see :mod:`.protocol`).

This module builds script arguments and parses replies; it never talks to Redis itself.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from typing import Any

from . import cleaning, cluster, scripts
from .cleaning import CleanReport
from .errors import InvalidArgumentError, OutcomeUnknownError, ReplicationError
from .item import Item
from .keyprefix import QueueKeys
from .protocol import Command, ScriptCall, Sleep, Steps

logger = logging.getLogger("redis_work_queue")

#: Ids a lease call may drop or bury before handing control back (and due delayed items it
#: promotes): BUDGET in lua/lease.lua.
LEASE_BUDGET = 100
#: The COUNT hint of each SCAN step of a flush.
SCAN_COUNT = 1000
#: Dead letters requeued or purged per script call.
DEAD_CHUNK = 500
#: Items added per script call, and the most bytes of data one call carries.
ADD_CHUNK = 500
ADD_CHUNK_BYTES = 4 << 20
#: Items leased per script call by lease_many.
LEASE_CHUNK = 500
#: Items completed per script call.
COMPLETE_CHUNK = 500
#: Processing-list entries whose lease one stats call checks.
STATS_CHUNK = 2000
#: Keys one flush step deletes.
FLUSH_CHUNK = 1000

_AGAIN = -2
#: Redis checks the timeouts of blocked clients on its own clock tick (100 ms at the default
#: hz 10), so a waiting worker wakes for a delayed item by blocking until shortly before it is
#: due and then sleeping locally for the rest: it gets the item within a few ms of its due time.
TICK_SECS = 0.11
#: The longest single blocking wait of a worker, whatever the timeout asked. A worker of
#: another implementation blocked on the same main queue may take the wake-up meant for ours
#: (see ``schedule`` in ``lua/include/delay.lua``); ours then still looks again within this
#: time. A worker's registration in ``P:waiting`` lapses one second after its wait ends, so
#: a worker killed while waiting leaves no trace after two.
WAIT_SLICE_SECS = 1.0


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


#: The longest duration accepted anywhere (lease, delay, TTL): about 31 years.
MAX_SECS = 10**9


def to_ms(seconds: float, what: str, minimum: int = 1) -> int:
    """Validate a duration in seconds and convert it to whole milliseconds.

    Raises:
        InvalidArgumentError: It is not a finite number of at least ``minimum`` ms and at most
            ``MAX_SECS`` seconds.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgumentError(
            f"{what} must be a number of seconds, not {type(seconds).__name__}"
        )
    if not math.isfinite(seconds) or seconds < 0 or (minimum > 0 and seconds <= 0):
        kind = "positive" if minimum > 0 else "zero or positive"
        raise InvalidArgumentError(f"{what} must be {kind} and finite, got {seconds!r}")
    if seconds > MAX_SECS:
        raise InvalidArgumentError(f"{what} must be at most {MAX_SECS} seconds, got {seconds!r}")
    ms = round(seconds * 1000)
    if ms < minimum:
        raise InvalidArgumentError(f"{what} must be at least {minimum / 1000}, got {seconds!r}")
    return ms


def check_max_deliveries(value: int | None) -> int:
    """Validate ``max_deliveries``; 0 stands for no limit in the scripts.

    Raises:
        InvalidArgumentError: It is not None or a positive int.
    """
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"max_deliveries must be a positive int or None, got {value!r}")
    return value


def max_block(db: Any) -> float:
    """The longest single blocking wait that fits in ``db``'s socket timeout."""
    socket_timeout = _connection_kwargs(db).get("socket_timeout")
    if not socket_timeout:
        return 60.0
    return max(float(socket_timeout) / 2, 0.01)


def _connection_kwargs(db: Any) -> dict[str, Any]:
    pool = getattr(db, "connection_pool", None)
    if pool is None and hasattr(db, "get_default_node"):  # Redis Cluster: ask one node
        node = db.get_default_node()
        pool = getattr(getattr(node, "redis_connection", None), "connection_pool", node)
    kwargs = getattr(pool, "connection_kwargs", None)
    return kwargs if isinstance(kwargs, dict) else {}


def check_replicas(value: int) -> int:
    """Validate a number of replicas to wait for.

    Raises:
        InvalidArgumentError: It is not an int of at least 0.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"replicas must be an int >= 0, got {value!r}")
    return value


def new_token() -> str:
    """A fresh lease token: 96 random bits (unique, not secret: it names a lease).

    The ``random`` module reseeds itself in a forked child, so forked workers never share
    tokens.
    """
    return f"{random.getrandbits(96):024x}"


def decode(raw: bytes | str) -> str:
    """Decode an id or text read from Redis; bytes that are not UTF-8 survive a round trip."""
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "surrogateescape")
    return raw


def check_item(item: object) -> Item:
    """Return ``item`` if it is an :class:`Item`.

    Raises:
        InvalidArgumentError: It is not.
    """
    if not isinstance(item, Item):
        raise InvalidArgumentError(f"expected an Item, got {type(item).__name__}")
    # An item is a dict, so its two keys can be changed after it was made.
    item_id, data = item.get("id"), item.get("data")
    if type(item_id) is not str or not isinstance(data, bytes):
        raise InvalidArgumentError(
            f"an item needs item['id'] a str and item['data'] bytes; got "
            f"{type(item_id).__name__} and {type(data).__name__} (make it with Item(data, id))"
        )
    return item


def held_token(item: object) -> tuple[Item, str]:
    """Return a leased item and its lease token.

    Raises:
        InvalidArgumentError: It is not an Item, or it was not leased by this library.
    """
    item = check_item(item)
    if item.lease_token is None:
        raise InvalidArgumentError(f"item {item.id()!r} carries no lease token: it was not leased")
    return item, item.lease_token


def when_due(delay: float | datetime | None) -> tuple[int, int]:
    """Turn a delay (seconds from now, or an aware datetime) into (delay ms, due ms)."""
    if delay is None:
        return 0, 0
    if isinstance(delay, datetime):
        if delay.tzinfo is None:
            raise InvalidArgumentError("a due time must be a timezone-aware datetime")
        return 0, max(round(delay.timestamp() * 1000), 1)
    return to_ms(delay, "delay", minimum=0), 0


def _add_chunks(items: Sequence[Item]) -> Iterator[Sequence[Item]]:
    chunk: list[Item] = []
    size = 0
    for item in items:
        if chunk and (len(chunk) >= ADD_CHUNK or size + len(item.data()) > ADD_CHUNK_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += len(item.data())
    if chunk:
        yield chunk


def _parse_token(value: bytes | str | None) -> tuple[str | None, float | None]:
    if value is None:
        return None, None
    token = decode(value)
    _, at, ms = token.rpartition("@")
    return token, int(ms) / 1000 if at and ms.isdigit() else None


def _chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


def _key_bytes(key: bytes | str) -> bytes:
    return key if isinstance(key, bytes) else key.encode("utf-8", "surrogateescape")


class QueueOps:
    """The operations of one queue, as generators of calls.

    Args:
        keys: The queue's key names.
        max_deliveries: Bury an item instead of handing it out more times than this; None for
            no limit.
    """

    def __init__(
        self,
        keys: QueueKeys,
        max_deliveries: int | None = None,
        replicas: int = 0,
        replica_timeout: float = 1.0,
    ) -> None:
        self.keys = keys
        self.max_deliveries = check_max_deliveries(max_deliveries)
        self.replicas = check_replicas(replicas)
        self.replica_timeout_ms = to_ms(replica_timeout, "replica_timeout")
        #: This queue's part of every script's KEYS and ARGV, and the keys named from them.
        self.script_keys = keys.script_keys
        self.script_args = keys.script_args
        self.slot_keys = keys.fixed()
        # Ready-made parts of the hot calls.
        self._add = scripts.load("add")
        self._complete = scripts.load("complete")
        self._add_unique = (keys.prefix, "1", 0, 0, 0)
        self._add_checked = (keys.prefix, "0", 0, 0, 0)
        self.plan = LeasePlan([self])
        #: What this queue's light cleans carry from one pass to the next.
        self.clean_state = cleaning.CleanState()

    def script_call(self, name: str, *args: scripts.Arg) -> ScriptCall:
        """A call of ``lua/<name>.lua`` with this queue's KEYS and leading ARGV, then ``args``.

        For operations written on the same conventions outside this module (the Spark data
        source's snapshot pages and held completes), to be driven by ``protocol.run``/``arun``.
        """
        return self._call(name, *args)

    def _call(
        self, name: str, *args: scripts.Arg, wait: tuple[int, int] | None = None
    ) -> ScriptCall:
        return ScriptCall(
            scripts.load(name),
            self.script_keys,
            (*self.script_args, *args),
            wait,
            self.slot_keys,
        )

    def _wait(self, replicas: int | None) -> tuple[int, int] | None:
        """The WAIT of a write: the call's ``replicas`` or else the queue's; None for none."""
        wanted = self.replicas if replicas is None else check_replicas(replicas)
        return (wanted, self.replica_timeout_ms) if wanted else None

    @staticmethod
    def _check_acked(wait: tuple[int, int] | None, reply: Any, done: object) -> Any:
        """Split a reply of a call made with ``wait``; raise when too few replicas acked."""
        if wait is None:
            return reply
        value, acked = reply
        if acked < wait[0]:
            raise ReplicationError(acked, wait[0], wait[1], done)
        return value

    # Adding -----------------------------------------------------------------------------------

    def add_call(
        self,
        items: Sequence[Item],
        unique: bool,
        delay: float | datetime | None = None,
        ttl: float | None = None,
        wait: tuple[int, int] | None = None,
    ) -> ScriptCall:
        """The one call that adds ``items`` (checking that each id is new unless ``unique``)."""
        delay_ms, due_ms = when_due(delay)
        ttl_ms = 0 if ttl is None else to_ms(ttl, "ttl")
        fields: list[scripts.Arg] = []
        for item in items:
            fields += (item.id(), item.data())
        flag = "1" if unique else "0"
        return self._call("add", flag, delay_ms, due_ms, ttl_ms, *fields, wait=wait)

    def queue_add_on(self, pipeline: Any, item: Item) -> None:
        """Queue the add of one item whose id is new on a pipeline (sync or asyncio).

        It leaves two replies in the pipeline's results, shaped as the reference client's SET
        and LPUSH leave them: 1 (the item was stored) and the main queue's length after it.

        Raises:
            InvalidArgumentError: ``item`` is not an Item.
            CrossSlotError: On a Redis Cluster pipeline, the queue's keys are not in one slot
                (nothing has been queued).
        """
        call = self.add_call([check_item(item)], unique=True)
        cluster.check_pipeline(pipeline, (*call.keys, *call.slot_keys))
        call.script.queue_on(pipeline, call.keys, (*call.args[:1], "p", *call.args[2:]))
        pipeline.execute_command("LLEN", self.keys.queue)

    def add(
        self,
        items: Iterable[Item],
        unique: bool,
        delay: float | datetime | None = None,
        ttl: float | None = None,
        replicas: int | None = None,
    ) -> Steps[list[bool]]:
        """Add items, in chunks; one flag per item, True when it was added."""
        checked = [check_item(item) for item in items]
        wait = self._wait(replicas)
        self.add_call([], unique, delay, ttl)  # validates the options before anything is sent
        added: list[bool] = []
        for chunk in _add_chunks(checked):
            try:
                reply = yield self.add_call(chunk, unique, delay, ttl, wait)
            except OutcomeUnknownError as err:
                err.result = added
                raise
            flags = reply if wait is None else reply[0]
            added += (bool(flag) for flag in flags)
            self._check_acked(wait, reply, added)
        return added

    def add_one(
        self,
        item: Item,
        unique: bool,
        delay: float | datetime | None = None,
        ttl: float | None = None,
        replicas: int | None = None,
    ) -> Steps[bool]:
        """Add one item; True when it was added."""
        if delay is None and ttl is None and replicas is None and not self.replicas:
            # The common case, kept short: it is a hot path.
            item = check_item(item)
            head = self._add_unique if unique else self._add_checked
            args = (*head, item.id(), item.data())
            return bool(
                (yield ScriptCall(self._add, self.script_keys, args, None, self.slot_keys))[0]
            )
        try:
            added = yield from self.add([item], unique, delay, ttl, replicas)
        except ReplicationError as err:
            err.result = (
                bool(err.result[0]) if isinstance(err.result, list) and err.result else False
            )
            raise
        except OutcomeUnknownError as err:
            err.result = None  # one item: nothing is known
            raise
        return added[0]

    # Leasing ----------------------------------------------------------------------------------

    def lease(
        self,
        lease_secs: float,
        block: bool,
        timeout: float,
        at_most_once: bool = False,
        max_block: float = 60.0,
        count: int = 1,
    ) -> Steps[list[Item]]:
        """Lease up to ``count`` items; see ``WorkQueue.lease``."""
        leased = yield from lease_steps(
            [self], lease_secs, block, timeout, at_most_once, max_block, count
        )
        return [item for _, item in leased]

    def lease_one(
        self,
        lease_secs: float,
        block: bool,
        timeout: float,
        at_most_once: bool = False,
        max_block: float = 60.0,
    ) -> Steps[Item | None]:
        """Lease one item, or None; see ``WorkQueue.lease``."""
        leased = yield from self.lease(lease_secs, block, timeout, at_most_once, max_block)
        return leased[0] if leased else None

    def renew(self, item: Item, lease_secs: float) -> Steps[bool]:
        """Extend a held lease; True when it was extended."""
        item, token = held_token(item)
        ms = to_ms(lease_secs, "lease_secs")
        renew = scripts.load("renew")
        return bool((yield ScriptCall(renew, (self.keys.lease(item.id()),), (token, ms))))

    def release(
        self, item: Item, delay: float, reason: str | None, undo: bool = False
    ) -> Steps[bool]:
        """Give a held item back; True when the caller held it.

        With ``undo`` the delivery is not counted and the item goes back to the leasing end, as
        if it had never been handed out (a worker that stops before starting the job).
        """
        return (yield from self.release_outcome(item, delay, reason, undo)) != Released.NOT_HELD

    def release_outcome(
        self, item: Item, delay: float, reason: str | None, undo: bool = False
    ) -> Steps[Released]:
        """Give a held item back and say where it went; see :meth:`release`."""
        item, token = held_token(item)
        delay_ms = to_ms(delay, "delay", minimum=0)
        extra: tuple[str, ...] = ()
        if reason is not None:
            if not isinstance(reason, str):
                raise InvalidArgumentError(f"reason must be a str, not {type(reason).__name__}")
            extra = (reason,)
        flag = "1" if undo else "0"
        call = self._call("release", item.id(), token, delay_ms, self.max_deliveries, flag, *extra)
        return Released(int((yield call)))

    # Completing -------------------------------------------------------------------------------

    def complete(self, items: Iterable[Item], replicas: int | None = None) -> Steps[list[Item]]:
        """Complete items; returns those this call completed."""
        checked = [check_item(item) for item in items]
        wait = self._wait(replicas)
        done: list[Item] = []
        for chunk in _chunks(checked, COMPLETE_CHUNK):
            try:
                reply = yield self._call("complete", *(item.id() for item in chunk), wait=wait)
            except OutcomeUnknownError as err:
                err.result = done
                raise
            flags = reply if wait is None else reply[0]
            done += (item for item, flag in zip(chunk, flags, strict=True) if flag)
            self._check_acked(wait, reply, done)
        return done

    def complete_one(self, item: Item, replicas: int | None = None) -> Steps[bool]:
        """Complete one item; True for the one call that removed it."""
        if replicas is None and not self.replicas:
            item = check_item(item)
            args = (self.keys.prefix, item.id())
            return bool(
                (yield ScriptCall(self._complete, self.script_keys, args, None, self.slot_keys))[0]
            )
        try:
            done = yield from self.complete([item], replicas)
        except ReplicationError as err:
            err.result = bool(err.result)
            raise
        except OutcomeUnknownError as err:
            err.result = None  # one item: nothing is known
            raise
        return bool(done)

    # Cleaning ---------------------------------------------------------------------------------

    def light_clean(self) -> Steps[CleanReport]:
        """One pass over the processing list; see ``WorkQueue.light_clean``."""
        return (yield from cleaning.light_clean(self, self.clean_state))

    def _scan(self, pattern: str) -> Steps[list[list[bytes]]]:
        """SCAN for ``pattern``; one list of keys per step."""
        batches: list[list[bytes]] = []
        cursor: Any = 0
        while True:
            scan = ("SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT)
            cursor, found = yield Command(scan, route=self.keys.queue, slot_keys=self.slot_keys)
            if isinstance(cursor, dict):  # redis-py's cluster client: {node: cursor}
                (cursor,) = cursor.values()
            if found:
                batches.append([_key_bytes(key) for key in found])
            if int(cursor) == 0:
                return batches

    def deep_clean(self, progress: cleaning.ProgressCallback | None = None) -> Steps[CleanReport]:
        """Recover every item not queued and not leased; see ``WorkQueue.deep_clean``."""
        return (yield from cleaning.deep_clean(self, new_token(), progress))

    # Inspection -------------------------------------------------------------------------------

    def stats(self) -> Steps[QueueStats]:
        """The queue's counts; the processing list is checked in chunks."""
        start = live = examined = 0
        while True:
            reply = yield self._call("stats", start, start + STATS_CHUNK - 1)
            queued, processing, delayed, dead, seen, alive = (int(v) for v in reply)
            examined += seen
            live += alive
            start += STATS_CHUNK
            if seen < STATS_CHUNK or start >= processing:
                break
        leased = min(live, processing)
        return QueueStats(
            queued=queued,
            leased=leased,
            expired=max(processing - leased, 0),
            delayed=delayed,
            dead=dead,
        )

    def peek(self, start: int, count: int) -> Steps[list[QueuedItem]]:
        """A page of the main queue, in leasing order; see ``WorkQueue.peek``."""
        _check_page(start, count)
        # Position p (0 = next to be leased) is list index -(p + 1); negative positions count
        # from the newest item, which is list index 0.
        if start >= 0:
            first, last = -(start + count), -(start + 1)
        else:
            first, last = -start - count, -start - 1
            first = max(first, 0)
        length, *rows = yield self._call("peek", first, last)
        base = start if start >= 0 else max(int(length) + start, 0)
        return [
            QueuedItem(base + offset, decode(raw_id), data)
            for offset, (raw_id, data) in enumerate(reversed(rows))
        ]

    def pending(self, start: int, count: int) -> Steps[list[PendingItem]]:
        """A page of the processing list, oldest lease first; see ``WorkQueue.pending``."""
        _check_page(start, count)
        if start >= 0:
            first, last = -(start + count), -(start + 1)
        else:
            first, last = max(-start - count, 0), -start - 1
        rows = yield self._call("pending", first, last)
        out = []
        for raw_id, deliveries, lease, pttl in reversed(rows):
            token, leased_at = _parse_token(lease)
            left = int(pttl) / 1000 if int(pttl) >= 0 else None
            out.append(PendingItem(decode(raw_id), int(deliveries), leased_at, left, token))
        return out

    def flush(self) -> Steps[FlushReport]:
        """Delete every key of the queue, in chunks; see ``WorkQueue.flush``."""
        keys = self.keys
        removed = items = 0
        for pattern in keys.patterns():
            for batch in (yield from self._scan(pattern)):
                for chunk in _chunks(batch, FLUSH_CHUNK):
                    gone = int((yield Command(("UNLINK", *chunk))))
                    removed += gone
                    if pattern == keys.item_pattern():
                        items += gone
        removed += int((yield Command(("UNLINK", *keys.fixed()))))
        report = FlushReport(keys=removed, items=items)
        logger.info("flushed %s: %s", keys.prefix, report)
        return report

    # Dead letters -----------------------------------------------------------------------------

    def dead_letters(self, start: int, count: int) -> Steps[list[DeadLetter]]:
        """One page of dead letters, oldest first."""
        _check_page(start, count)
        stop = start + count - 1
        if start < 0 <= stop:
            stop = -1
        rows = yield self._call("dead_letters", start, stop)
        return [
            DeadLetter(decode(i), data, int(n), decode(reason), int(ms) / 1000)
            for i, data, n, reason, ms in rows
        ]

    def _dead_action(self, name: str, ids: Iterable[str] | None) -> Steps[int]:
        done = 0
        if ids is None:
            while True:
                moved, missed = (int(v) for v in (yield self._call(name, "oldest", DEAD_CHUNK)))
                done += moved
                if moved + missed < DEAD_CHUNK or moved == 0:
                    return done
        for chunk in _chunks([str(i) for i in ids], DEAD_CHUNK):
            moved, _ = yield self._call(name, "ids", *chunk)
            done += int(moved)
        return done

    def requeue_dead(self, ids: Iterable[str] | None) -> Steps[int]:
        """Requeue dead letters (all when ``ids`` is None); returns how many."""
        return (yield from self._dead_action("requeue_dead", ids))

    def purge_dead(self, ids: Iterable[str] | None) -> Steps[int]:
        """Delete dead letters (all when ``ids`` is None); returns how many."""
        return (yield from self._dead_action("purge_dead", ids))

    # Counting ---------------------------------------------------------------------------------

    def length(self, key: str, kind: str = "LLEN") -> Steps[int]:
        """The length of one of the queue's keys."""
        return int((yield Command((kind, key))))


def _check_page(start: int, count: int) -> None:
    if isinstance(start, bool) or not isinstance(start, int):
        raise InvalidArgumentError(f"start must be an int, got {start!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidArgumentError(f"count must be a positive int, got {count!r}")


class LeasePlan:
    """The fixed parts of the lease calls over one list of queues (built once per queue)."""

    __slots__ = ("keys", "limits", "prefix_args", "queues", "slot_keys")

    def __init__(self, queues: Sequence[QueueOps]) -> None:
        self.queues = tuple(queues)
        self.keys = tuple(k for q in queues for k in q.script_keys)
        self.prefix_args = tuple(a for q in queues for a in q.script_args)
        self.slot_keys = tuple(k for q in queues for k in q.slot_keys)
        self.limits = tuple(q.max_deliveries for q in queues)

    def lease(
        self,
        ms: int,
        token: str,
        once: str,
        want: int,
        flag_ms: int = 0,
        who: str = "",
        registered: bool = False,
    ) -> ScriptCall:
        """The lease script call (see lua/lease.lua)."""
        args: tuple[scripts.Arg, ...] = (
            *self.prefix_args,
            ms,
            token,
            once,
            want,
            flag_ms,
            who,
            "1" if registered else "0",
            *self.limits,
        )
        return ScriptCall(scripts.load("lease"), self.keys, args, None, self.slot_keys)

    def claim(self, ms: int, token: str, once: str, moved: bytes, who: str) -> ScriptCall:
        """The claim script call (see lua/claim.lua); one queue only."""
        args: tuple[scripts.Arg, ...] = (
            *self.prefix_args,
            ms,
            token,
            once,
            moved,
            who,
            self.limits[0],
        )
        return ScriptCall(scripts.load("claim"), self.keys, args, None, self.slot_keys)


def lease_steps(
    queues: Sequence[QueueOps],
    lease_secs: float,
    block: bool,
    timeout: float,
    at_most_once: bool,
    max_block: float,
    count: int,
) -> Steps[list[tuple[int, Item]]]:
    """Lease up to ``count`` items from ``queues`` in priority order; (queue index, item) pairs.

    One queue blocks with BRPOPLPUSH and a claim. Several queues (which must share one script
    call) block on their wake lists: the lease script, finding nothing, registers the worker with
    the queues, and every script that pushes onto a queue with a registered worker also pushes a
    wake-up token. A wake-up carries no item, so a worker that dies while waiting loses nothing.
    A delayed item that falls due before the others also wakes a waiting worker (see
    ``schedule`` in ``lua/include/delay.lua``), which then waits for the new due time.
    """
    if type(count) is not int or count < 1:
        raise InvalidArgumentError(f"count must be a positive int, got {count!r}")
    ms = to_ms(lease_secs, "lease_secs")
    once = "1" if at_most_once else "0"
    plan = queues[0].plan if len(queues) == 1 else LeasePlan(queues)
    if not block:
        token = new_token()
        while True:
            reply = yield plan.lease(ms, token, once, min(count, LEASE_CHUNK))
            if reply != _AGAIN:
                break
        if not isinstance(reply, list):
            return []
        got = [_leased(row, token, at_most_once) for row in reply]
        more = len(reply) == min(count, LEASE_CHUNK)
        return (yield from _lease_rest(plan, ms, once, at_most_once, count, got, more))
    wait_ms = to_ms(timeout, "timeout", minimum=0)
    deadline = time.monotonic() + wait_ms / 1000 if wait_ms else math.inf
    waiter = new_token()
    registered = False
    while True:
        token = new_token()
        remaining = deadline - time.monotonic()
        slice_secs = max(min(remaining, max_block, WAIT_SLICE_SECS), 0.001)
        flag_ms = round(slice_secs * 1000) + 1000 if remaining > 0.001 else 0
        want = min(count, LEASE_CHUNK)
        reply = yield plan.lease(ms, token, once, want, flag_ms, waiter, registered)
        registered = registered or (flag_ms > 0 and not isinstance(reply, list))
        if isinstance(reply, list):
            got = [_leased(row, token, at_most_once) for row in reply]
            more = len(reply) == min(count, LEASE_CHUNK)
            return (yield from _lease_rest(plan, ms, once, at_most_once, count, got, more))
        if reply == _AGAIN:
            continue
        if remaining <= 0.001:
            return []
        if reply >= 0:
            # A delayed item falls due: block until one tick before, then sleep to it.
            due = reply / 1000 + 0.001
            if due <= TICK_SECS:
                yield Sleep(min(due, remaining))
                continue
            slice_secs = min(slice_secs, due - TICK_SECS)
        wait = round(max(slice_secs, 0.001), 3)
        if len(queues) > 1:
            yield Command(("BLPOP", *(q.keys.wake for q in queues), wait))
            continue
        keys = queues[0].keys
        moved = yield Command(("BRPOPLPUSH", keys.queue, keys.processing, wait))
        if moved is None:
            continue
        reply = yield plan.claim(ms, token, once, moved, waiter)
        if isinstance(reply, list):
            # What woke us may have brought more: take it too, without waiting.
            got = [_leased(row, token, at_most_once) for row in reply]
            return (yield from _lease_rest(plan, ms, once, at_most_once, count, got, True))


def _lease_rest(
    plan: LeasePlan,
    ms: int,
    once: str,
    at_most_once: bool,
    count: int,
    got: list[tuple[int, Item]],
    more: bool,
) -> Steps[list[tuple[int, Item]]]:
    """Take what is left of ``count``, in chunks, without waiting (if there may be ``more``)."""
    while more and len(got) < count:
        want = min(count - len(got), LEASE_CHUNK)
        token = new_token()
        reply = yield plan.lease(ms, token, once, want)
        if reply == _AGAIN:
            continue
        if not isinstance(reply, list):
            break
        got += (_leased(row, token, at_most_once) for row in reply)
        more = len(reply) == want
    return got


def _leased(row: list[Any], token: str, at_most_once: bool) -> tuple[int, Item]:
    index, raw_id, data, deliveries, leased_at = row
    lease_token = None if at_most_once else f"{token}@{leased_at}"
    return index - 1, Item.handed_out(decode(raw_id), data, deliveries, lease_token)

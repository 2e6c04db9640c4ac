"""WorkQueue: builds the arguments of the queue scripts and parses their replies."""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import ResponseError

from . import scripts
from .errors import InvalidArgumentError
from .item import Item
from .keyprefix import KeyPrefix, QueueKeys

logger = logging.getLogger(__name__)

#: Ids a lease call may drop (completed items, stray copies) before handing control back.
LEASE_BUDGET = 100
#: Ids one light-clean call examines: well under a millisecond of server time.
CLEAN_CHUNK = 500
#: The COUNT hint of each SCAN step of the deep clean.
SCAN_COUNT = 1000
#: Ids read per LRANGE when the deep clean takes its snapshot of the lists.
SNAPSHOT_CHUNK = 2000
#: Suspects re-checked per deep-clean call (each costs a scan of both lists, in C).
RECHECK_CHUNK = 20


@dataclass(frozen=True)
class CleanReport:
    """What one clean did.

    Attributes:
        examined: Ids looked at (light clean: processing-list entries; deep clean: data keys).
        requeued: Items pushed back onto the main queue.
        dropped: Ids removed from the processing list because their item no longer exists.
    """

    examined: int = 0
    requeued: int = 0
    dropped: int = 0


def lease_ms(lease_secs: float) -> int:
    """Validate a lease length in seconds and convert it to whole milliseconds.

    Raises:
        InvalidArgumentError: The length is not a positive, finite number of at least 1 ms.
    """
    if isinstance(lease_secs, bool) or not isinstance(lease_secs, int | float):
        raise InvalidArgumentError(
            f"lease_secs must be a number of seconds, not {type(lease_secs).__name__}"
        )
    if not math.isfinite(lease_secs) or lease_secs <= 0:
        raise InvalidArgumentError(f"lease_secs must be positive and finite, got {lease_secs!r}")
    ms = round(lease_secs * 1000)
    if ms < 1:
        raise InvalidArgumentError(f"lease_secs must be at least 0.001, got {lease_secs!r}")
    return ms


def check_timeout(timeout: float) -> float:
    """Validate a blocking timeout in seconds (0 waits for ever).

    Raises:
        InvalidArgumentError: The timeout is negative or not a finite number.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InvalidArgumentError(f"timeout must be a number, not {type(timeout).__name__}")
    if not math.isfinite(timeout) or timeout < 0:
        raise InvalidArgumentError(f"timeout must be zero or positive, got {timeout!r}")
    return float(timeout)


def new_token() -> str:
    """A fresh, random lease token."""
    return secrets.token_hex(12)


def decode_id(raw: bytes | str) -> str:
    """Decode an id read from Redis; bytes that are not UTF-8 survive a round trip."""
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "surrogateescape")
    return raw


def _check_item(item: object) -> Item:
    if not isinstance(item, Item):
        raise InvalidArgumentError(f"expected an Item, got {type(item).__name__}")
    return item


def _chunks(seq: list[bytes], size: int) -> Iterator[list[bytes]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


class WorkQueue:
    """A reliable work queue on one Redis database, identified by its key prefix.

    Every operation is a single Lua script call, so a queue is never left half-changed by a
    crashed client. The key layout (``<prefix>:queue``, ``<prefix>:processing``,
    ``<prefix>:item:<id>``, ``<prefix>:lease:<id>``) is shared with other clients of the design.

    Args:
        name: The queue's key prefix. Put a ``{hash tag}`` in it to keep the queue in one
            Redis Cluster slot.
    """

    def __init__(self, name: KeyPrefix) -> None:
        if not isinstance(name, KeyPrefix):
            raise InvalidArgumentError(
                f"a queue is named by a KeyPrefix, not {type(name).__name__}"
            )
        self.name = name
        self.keys = QueueKeys(name)

    def __repr__(self) -> str:
        return f"WorkQueue({self.name!r})"

    # Adding -----------------------------------------------------------------------------------

    def add_item(self, db: Redis, item: Item) -> bool:
        """Add an item unless an item with the same id already exists.

        Args:
            db: The Redis client.
            item: The item to add.

        Returns:
            True when the item was added; False when an item with this id exists already
            (queued or leased), in which case nothing changed.

        Raises:
            WrongKeyTypeError: The main queue key holds something other than a list.
        """
        item = _check_item(item)
        keys = self.keys
        added = scripts.load("add_item")(
            db, (keys.queue, keys.item(item.id())), (item.id(), item.data())
        )
        return bool(added)

    def add_unique_item(self, db: Redis, item: Item) -> None:
        """Add an item whose id is known to be new (such as a fresh UUID), skipping the check.

        Adding an id that does exist overwrites its data and queues it a second time; the
        second copy is dropped when it is met, so this costs accuracy of ``queue_len`` only.

        Raises:
            WrongKeyTypeError: The main queue key holds something other than a list.
        """
        item = _check_item(item)
        scripts.load("add_unique_item")(
            db, (self.keys.queue, self.keys.item(item.id())), (item.id(), item.data())
        )

    def add_unique_item_to_pipeline(self, pipeline: Pipeline, item: Item) -> None:
        """Queue an ``add_unique_item`` on a pipeline; it runs when the pipeline executes."""
        item = _check_item(item)
        scripts.load("add_unique_item")(
            pipeline, (self.keys.queue, self.keys.item(item.id())), (item.id(), item.data())
        )

    def add_item_to_pipeline(self, pipeline: Pipeline, item: Item) -> None:
        """Same as :meth:`add_unique_item_to_pipeline` (the name other clients use for it)."""
        self.add_unique_item_to_pipeline(pipeline, item)

    # Leasing ----------------------------------------------------------------------------------

    def lease(
        self, db: Redis, lease_secs: float, block: bool = True, timeout: float = 0
    ) -> Item | None:
        """Lease the oldest queued item for ``lease_secs`` seconds.

        When the queue has items this is one script call. When it is empty and ``block`` is
        true, the worker waits on a blocking BRPOPLPUSH (scripts cannot block), which moves an
        id onto the processing list, and then a claim script takes the lease. A worker that dies
        between the two leaves the id on the processing list without a lease, where the next
        light clean finds it and requeues it: nothing is lost. The claim only succeeds while the
        id is still on the processing list, so a cleaner that requeued it first wins cleanly.

        A blocking call ties up its connection while it waits: give the client no
        ``socket_timeout`` shorter than ``timeout`` (or none when ``timeout`` is 0).

        Args:
            db: The Redis client.
            lease_secs: How long the lease lasts, in seconds (millisecond precision).
            block: Wait for an item when the queue is empty.
            timeout: With ``block``, how long to wait in seconds; 0 waits for ever.

        Returns:
            The leased item, carrying its ``lease_token``; None when nothing could be leased
            (``block`` false and the queue empty, or the timeout passed).

        Raises:
            InvalidArgumentError: ``lease_secs`` or ``timeout`` is out of range.
            WrongKeyTypeError: A queue key holds the wrong Redis type.
        """
        ms = lease_ms(lease_secs)
        wait = check_timeout(timeout)
        deadline = time.monotonic() + wait if wait else math.inf
        keys = self.keys
        head = (keys.item_prefix, keys.lease_prefix, ms)
        lease_script = scripts.load("lease")
        while True:
            token = new_token()
            reply = lease_script(db, (keys.queue, keys.processing), (*head, token, LEASE_BUDGET))
            if reply == 1:
                continue
            if reply != 0:
                return self._leased(reply, token)
            if not block:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0.001:
                return None
            moved = self._blocking_move(db, 0 if remaining == math.inf else remaining)
            if moved is None:
                return None
            reply = scripts.load("claim")(db, (keys.processing,), (*head, token, moved))
            if reply != 0:
                return self._leased(reply, token)

    def _blocking_move(self, db: Redis, wait: float) -> bytes | None:
        moved: bytes | None = scripts.raw_command(
            db, "BRPOPLPUSH", self.keys.queue, self.keys.processing, round(wait, 3)
        )
        return moved

    @staticmethod
    def _leased(reply: Any, token: str) -> Item:
        raw_id, data = reply
        item = Item(data, id=decode_id(raw_id))
        item.lease_token = token
        return item

    # Completing -------------------------------------------------------------------------------

    def complete(self, db: Redis, item: Item) -> bool:
        """Mark an item as done and remove it from the queue.

        Returns:
            True for exactly one call per item: the call that removed it. Every later call (or
            a call racing it) returns False. Once it has returned True, no worker leases the
            item again.

        Raises:
            WrongKeyTypeError: The processing key holds something other than a list.
        """
        item = _check_item(item)
        keys = self.keys
        item_id = item.id()
        removed = scripts.load("complete")(
            db, (keys.processing, keys.item(item_id), keys.lease(item_id)), (item_id,)
        )
        return bool(removed)

    # Cleaning ---------------------------------------------------------------------------------

    def light_clean(self, db: Redis) -> CleanReport:
        """Requeue items whose lease has expired, going through the processing list once.

        The list is walked from its oldest end in steps of at most ``CLEAN_CHUNK`` ids, each one
        script call, so Redis is never held for more than about a millisecond. Run it about as
        often as your shortest lease time.

        Returns:
            How many entries were examined, how many items were requeued and how many ids of
            completed items were dropped from the processing list.

        Raises:
            WrongKeyTypeError: A queue key holds the wrong Redis type.
        """
        keys = self.keys
        step = scripts.load("light_clean")
        total = self._llen(db, keys.processing)
        examined = requeued = dropped = 0
        while examined < total:
            budget = min(CLEAN_CHUNK, total - examined)
            seen, back, gone = step(
                db, (keys.queue, keys.processing), (keys.item_prefix, keys.lease_prefix, budget)
            )
            examined += seen
            requeued += back
            dropped += gone
            if seen < budget:
                break
        report = CleanReport(examined=examined, requeued=requeued, dropped=dropped)
        if requeued or dropped:
            logger.info("light clean of %s: %s", self.name.prefix, report)
        else:
            logger.debug("light clean of %s: %s", self.name.prefix, report)
        return report

    def deep_clean(self, db: Redis) -> CleanReport:
        """Find items that are in neither list and have no lease, and requeue them.

        Such items only appear when a client of another implementation dies half-way through a
        multi-command operation, or when a list key is lost; run this rarely (hourly or daily).

        It works in bounded steps: SCAN over ``<prefix>:item:*`` (never KEYS; the prefix is
        glob-escaped), a read-only script that keeps the unleased ids of each step, a snapshot of
        both lists read in chunks, and finally, for each id missing from the snapshot, a script
        that re-checks it atomically before requeueing it. Cost: linear in the number of items,
        plus one scan of the lists (in C, inside Redis) per id found missing.

        Returns:
            How many data keys were examined and how many items were requeued.

        Raises:
            WrongKeyTypeError: A queue key holds the wrong Redis type.
        """
        keys = self.keys
        unleased = scripts.load("unleased")
        offset = len(keys.item_prefix.encode("utf-8"))
        head = (keys.item_prefix, keys.lease_prefix)
        examined = 0
        candidates: list[bytes] = []
        cursor: Any = 0
        while True:
            cursor, found = db.scan(cursor, match=keys.item_pattern(), count=SCAN_COUNT)
            if found:
                ids = [_key_bytes(key)[offset:] for key in found]
                examined += len(ids)
                candidates.extend(unleased(db, (keys.queue,), (*head, *ids)))
            if int(cursor) == 0:
                break
        requeued = 0
        if candidates:
            listed = self._snapshot(db, keys.processing) | self._snapshot(db, keys.queue)
            suspects = list(dict.fromkeys(c for c in candidates if c not in listed))
            recheck = scripts.load("deep_clean")
            for chunk in _chunks(suspects, RECHECK_CHUNK):
                done = recheck(db, (keys.queue, keys.processing), (*head, *chunk))
                requeued += len(done)
        report = CleanReport(examined=examined, requeued=requeued)
        if requeued:
            logger.warning("deep clean of %s requeued %d lost items", self.name.prefix, requeued)
        else:
            logger.info("deep clean of %s: %s", self.name.prefix, report)
        return report

    def _snapshot(self, db: Redis, key: str) -> set[bytes]:
        """Read a list in chunks from its head; ids that stay in it all along are all seen."""
        seen: set[bytes] = set()
        start = 0
        while True:
            chunk = scripts.raw_command(db, "LRANGE", key, start, start + SNAPSHOT_CHUNK - 1)
            seen.update(chunk)
            if len(chunk) < SNAPSHOT_CHUNK:
                return seen
            start += SNAPSHOT_CHUNK

    # Counting ---------------------------------------------------------------------------------

    def queue_len(self, db: Redis) -> int:
        """The number of ids in the main queue (leased items are not counted)."""
        return self._llen(db, self.keys.queue)

    def processing(self, db: Redis) -> int:
        """The number of ids in the processing list.

        It counts leased items and items whose lease expired but that no clean has requeued yet.
        """
        return self._llen(db, self.keys.processing)

    @staticmethod
    def _llen(db: Redis, key: str) -> int:
        try:
            return int(db.llen(key))
        except ResponseError as err:
            raise scripts.translate_error(err) from err


def _key_bytes(key: bytes | str) -> bytes:
    return key if isinstance(key, bytes) else key.encode("utf-8", "surrogateescape")

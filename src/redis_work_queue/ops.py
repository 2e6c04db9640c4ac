"""Every queue operation, written once as a generator of Redis calls (see :mod:`.protocol`).

This module builds script arguments and parses replies; it never talks to Redis itself.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from . import scripts
from .errors import InvalidArgumentError
from .item import Item
from .keyprefix import QueueKeys
from .protocol import Command, ScriptCall, Sleep, Steps

#: Ids a lease call may drop or bury before handing control back (and due delayed items it
#: promotes).
LEASE_BUDGET = 100
#: Ids one light-clean call examines: well under a millisecond of server time.
CLEAN_CHUNK = 500
#: The COUNT hint of each SCAN step of the deep clean.
SCAN_COUNT = 1000
#: Ids read per LRANGE when the deep clean takes its snapshot of the lists.
SNAPSHOT_CHUNK = 2000
#: Suspects re-checked per deep-clean call (each costs a scan of both lists, in C).
RECHECK_CHUNK = 20
#: Dead letters requeued or purged per script call.
DEAD_CHUNK = 500

_AGAIN = -2
#: Redis checks the timeouts of blocked clients on its own clock tick (100 ms at the default
#: hz 10), so a waiting worker wakes for a delayed item by blocking until shortly before it is
#: due and then sleeping locally for the rest: it gets the item within a few ms of its due time.
TICK_SECS = 0.11


@dataclass(frozen=True)
class CleanReport:
    """What one clean did.

    Attributes:
        examined: Ids looked at (light clean: processing-list entries; deep clean: data keys).
        requeued: Items pushed back onto the main queue.
        dropped: Ids removed from the processing list because their item no longer exists.
        dead: Items moved to the dead-letter store: their lease expired on their last allowed
            delivery (light clean only).
        forgotten: Delivery counts and reasons dropped because their item no longer exists (deep
            clean only).
    """

    examined: int = 0
    requeued: int = 0
    dropped: int = 0
    dead: int = 0
    forgotten: int = 0


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


def to_ms(seconds: float, what: str, minimum: int = 1) -> int:
    """Validate a duration in seconds and convert it to whole milliseconds.

    Raises:
        InvalidArgumentError: It is not a finite number of at least ``minimum`` ms.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgumentError(
            f"{what} must be a number of seconds, not {type(seconds).__name__}"
        )
    if not math.isfinite(seconds) or seconds < 0 or (minimum > 0 and seconds <= 0):
        kind = "positive" if minimum > 0 else "zero or positive"
        raise InvalidArgumentError(f"{what} must be {kind} and finite, got {seconds!r}")
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
    kwargs = getattr(getattr(db, "connection_pool", None), "connection_kwargs", {})
    socket_timeout = kwargs.get("socket_timeout") if isinstance(kwargs, dict) else None
    if not socket_timeout:
        return 60.0
    return max(float(socket_timeout) / 2, 0.01)


def new_token() -> str:
    """A fresh, random lease token."""
    return secrets.token_hex(12)


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

    def __init__(self, keys: QueueKeys, max_deliveries: int | None = None) -> None:
        self.keys = keys
        self.max_deliveries = check_max_deliveries(max_deliveries)

    def _call(self, name: str, *args: scripts.Arg) -> ScriptCall:
        keys = self.keys
        return ScriptCall(scripts.load(name), keys.script_keys, (*keys.script_args, *args))

    # Adding -----------------------------------------------------------------------------------

    def add_call(self, item: Item, unique: bool) -> ScriptCall:
        """The call that adds ``item`` (checking that its id is new unless ``unique``)."""
        item = check_item(item)
        name = "add_unique_item" if unique else "add_item"
        return ScriptCall(
            scripts.load(name),
            (self.keys.queue, self.keys.item(item.id())),
            (item.id(), item.data()),
        )

    def add(self, item: Item, unique: bool) -> Steps[bool]:
        """Add one item; True when it was added."""
        return bool((yield self.add_call(item, unique)))

    # Leasing ----------------------------------------------------------------------------------

    def lease(
        self,
        lease_secs: float,
        block: bool,
        timeout: float,
        at_most_once: bool = False,
        max_block: float = 60.0,
    ) -> Steps[Item | None]:
        """Lease (or, ``at_most_once``, take) the oldest item; see ``WorkQueue.lease``.

        A blocking wait is cut into waits of at most ``max_block`` seconds, so that it fits in
        the connection's socket timeout.
        """
        ms = to_ms(lease_secs, "lease_secs")
        wait_ms = to_ms(timeout, "timeout", minimum=0)
        deadline = time.monotonic() + wait_ms / 1000 if wait_ms else math.inf
        once = "1" if at_most_once else "0"
        while True:
            token = new_token()
            head = (ms, token, LEASE_BUDGET, self.max_deliveries, once)
            reply = yield self._call("lease", *head)
            if isinstance(reply, list):
                return self._leased(reply, token, at_most_once)
            if reply == _AGAIN:
                continue
            if not block:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0.001:
                return None
            if reply >= 0:
                # A delayed item falls due: block until one tick before, then sleep to it.
                due = reply / 1000 + 0.001
                if due <= TICK_SECS:
                    yield Sleep(min(due, remaining))
                    continue
                remaining = min(remaining, due - TICK_SECS)
            wait = round(max(min(remaining, max_block), 0.001), 3)
            moved = yield Command(("BRPOPLPUSH", self.keys.queue, self.keys.processing, wait))
            if moved is None:
                if time.monotonic() >= deadline:
                    return None
                continue
            reply = yield self._call("claim", *head, moved)
            if isinstance(reply, list):
                return self._leased(reply, token, at_most_once)

    @staticmethod
    def _leased(reply: list[Any], token: str, at_most_once: bool) -> Item:
        raw_id, data, deliveries = reply
        item = Item(data, id=decode(raw_id))
        item.deliveries = int(deliveries)
        item.lease_token = None if at_most_once else token
        return item

    def renew(self, item: Item, lease_secs: float) -> Steps[bool]:
        """Extend a held lease; True when it was extended."""
        item, token = held_token(item)
        ms = to_ms(lease_secs, "lease_secs")
        renew = scripts.load("renew")
        return bool((yield ScriptCall(renew, (self.keys.lease(item.id()),), (token, ms))))

    def release(self, item: Item, delay: float, reason: str | None) -> Steps[bool]:
        """Give a held item back; True when the caller held it."""
        item, token = held_token(item)
        delay_ms = to_ms(delay, "delay", minimum=0)
        extra: tuple[str, ...] = ()
        if reason is not None:
            if not isinstance(reason, str):
                raise InvalidArgumentError(f"reason must be a str, not {type(reason).__name__}")
            extra = (reason,)
        call = self._call("release", item.id(), token, delay_ms, self.max_deliveries, *extra)
        return bool((yield call))

    # Completing -------------------------------------------------------------------------------

    def complete(self, item: Item) -> Steps[bool]:
        """Complete an item; True for the one call that removed it."""
        item = check_item(item)
        return bool((yield self._call("complete", item.id())))

    # Cleaning ---------------------------------------------------------------------------------

    def light_clean(self) -> Steps[CleanReport]:
        """One pass over the processing list; see ``WorkQueue.light_clean``."""
        total = int((yield Command(("LLEN", self.keys.processing))))
        examined = requeued = dropped = dead = 0
        while True:
            budget = max(min(CLEAN_CHUNK, total - examined), 1)
            seen, back, gone, buried = yield self._call("light_clean", budget, self.max_deliveries)
            examined += seen
            requeued += back
            dropped += gone
            dead += buried
            if seen < budget or examined >= total:
                break
        return CleanReport(examined=examined, requeued=requeued, dropped=dropped, dead=dead)

    def deep_clean(self) -> Steps[CleanReport]:
        """Recover items lost from both lists; see ``WorkQueue.deep_clean``."""
        keys = self.keys
        offset = len(keys.item_prefix.encode("utf-8"))
        examined = 0
        candidates: list[bytes] = []
        cursor: Any = 0
        pattern = keys.item_pattern()
        while True:
            cursor, found = yield Command(("SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT))
            if found:
                ids = [_key_bytes(key)[offset:] for key in found]
                examined += len(ids)
                candidates.extend((yield self._call("unleased", *ids)))
            if int(cursor) == 0:
                break
        requeued = 0
        if candidates:
            listed = yield from self._snapshot(keys.processing)
            listed |= yield from self._snapshot(keys.queue)
            suspects = list(dict.fromkeys(c for c in candidates if c not in listed))
            for chunk in _chunks(suspects, RECHECK_CHUNK):
                requeued += len((yield self._call("deep_clean", *chunk)))
        forgotten = 0
        for key in (keys.deliveries, keys.reasons):
            cursor = 0
            while True:
                cursor, fields = yield Command(("HSCAN", key, cursor, "COUNT", SCAN_COUNT))
                # redis-py parses HSCAN into a dict; a raw reply is a flat list.
                ids = list(fields) if isinstance(fields, dict) else fields[0::2]
                if ids:
                    forgotten += int((yield self._call("forget_gone", *ids)))
                if int(cursor) == 0:
                    break
        return CleanReport(examined=examined, requeued=requeued, forgotten=forgotten)

    def _snapshot(self, key: str) -> Steps[set[bytes]]:
        """Read a list in chunks from its head; ids that stay in it all along are all seen."""
        seen: set[bytes] = set()
        start = 0
        while True:
            chunk = yield Command(("LRANGE", key, start, start + SNAPSHOT_CHUNK - 1))
            seen.update(chunk)
            if len(chunk) < SNAPSHOT_CHUNK:
                return seen
            start += SNAPSHOT_CHUNK

    # Dead letters -----------------------------------------------------------------------------

    def dead_letters(self, start: int, count: int) -> Steps[list[DeadLetter]]:
        """One page of dead letters, oldest first."""
        if isinstance(start, bool) or not isinstance(start, int):
            raise InvalidArgumentError(f"start must be an int, got {start!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidArgumentError(f"count must be a positive int, got {count!r}")
        stop = start + count - 1
        if start < 0 <= stop:
            stop = -1
        rows = yield self._call("dead_letters", start, stop)
        return [
            DeadLetter(decode(i), data, int(n), decode(reason), int(ms) / 1000)
            for i, data, n, reason, ms in rows
        ]

    def _dead_action(self, name: str, ids: Iterable[str] | None) -> Steps[tuple[int, int]]:
        done = skipped = 0
        if ids is None:
            while True:
                reply = yield self._call(name, "oldest", DEAD_CHUNK)
                moved, missed = reply if isinstance(reply, list) else (reply, 0)
                done += moved
                skipped += missed
                if moved + missed < DEAD_CHUNK or moved == 0:
                    return done, skipped
        chosen = [str(i) for i in ids]
        for chunk in _chunks(chosen, DEAD_CHUNK):
            reply = yield self._call(name, "ids", *chunk)
            moved, missed = reply if isinstance(reply, list) else (reply, len(chunk) - reply)
            done += moved
            skipped += missed
        return done, skipped

    def requeue_dead(self, ids: Iterable[str] | None) -> Steps[int]:
        """Requeue dead letters (all when ``ids`` is None); returns how many."""
        done, _ = yield from self._dead_action("requeue_dead", ids)
        return done

    def purge_dead(self, ids: Iterable[str] | None) -> Steps[int]:
        """Delete dead letters (all when ``ids`` is None); returns how many."""
        done, _ = yield from self._dead_action("purge_dead", ids)
        return done

    # Counting ---------------------------------------------------------------------------------

    def length(self, key: str, kind: str = "LLEN") -> Steps[int]:
        """The length of one of the queue's keys."""
        return int((yield Command((kind, key))))

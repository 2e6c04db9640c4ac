"""What the dashboard reads from Redis: queue discovery, counts, samples, safe previews.

Everything here talks to a ``redis.asyncio`` client through :class:`AsyncWorkQueue`, so the
dashboard reads exactly what the library's own inspection methods return.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import redis
from redis.asyncio import Redis as AsyncRedis

from ..aio import AsyncWorkQueue
from ..errors import InvalidArgumentError, WrongKeyTypeError
from ..health import alive_workers
from ..keyprefix import KeyPrefix, QueueKeys, check_queue_name
from ..ops import DeadLetter

#: The fixed keys that make a queue visible to discovery, by the name after its prefix.
QUEUE_SUFFIXES = (":queue", ":processing", ":delayed", ":dead")
#: Keys asked for in one SCAN step: each step costs the server about a millisecond.
SCAN_COUNT = 1000
#: SCAN steps of one discovery at most (so at most about ``SCAN_STEPS * SCAN_COUNT`` keys looked
#: at); on a larger keyspace the queues found so far are shown.
SCAN_STEPS = 200
#: Queues shown at most.
MAX_QUEUES = 200
#: Bytes of an item's data shown at most.
PREVIEW_BYTES = 256
#: Rows of each per-queue table (waiting, pending, dead letters).
PAGE = 20


def discovery_pattern(match: str) -> str:
    """The SCAN MATCH pattern that finds the fixed keys of queues whose names match ``match``.

    ``match`` is a Redis glob over queue names (``jobs:*``); the suffix added after it is literal
    and holds no glob character. The pattern is narrowed to keys whose last segment starts like a
    queue's fixed keys (``queue``, ``processing``, ``delayed``, ``dead``); the exact suffix is
    checked on each key found.

    Args:
        match: The queue-name pattern.

    Returns:
        The SCAN MATCH pattern.
    """
    return match + ":[qpd]*"


def queue_name_of(key: str) -> str | None:
    """The queue a fixed key belongs to, or None when the key is not one of a queue's.

    Args:
        key: A key found by :func:`discovery_pattern`.

    Returns:
        The queue's name (its key prefix), or None.
    """
    for suffix in QUEUE_SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            name = key[: -len(suffix)]
            try:
                return check_queue_name(name)
            except InvalidArgumentError:
                return None  # a per-item key of another queue (``x:dead:<id>`` and the like)
    return None


async def discover(db: AsyncRedis, patterns: Iterable[str]) -> tuple[list[str], bool]:
    """Find queues by SCAN (never ``KEYS``), in bounded steps.

    Args:
        db: The Redis client.
        patterns: Glob patterns over queue names.

    Returns:
        The queue names found, sorted, and whether the search stopped early (step or queue
        bound reached) so that more queues may exist.
    """
    found: set[str] = set()
    truncated = False
    for match in patterns:
        cursor: int = 0
        steps = 0
        while True:
            cursor, keys = await db.scan(cursor, match=discovery_pattern(match), count=SCAN_COUNT)
            steps += 1
            for raw in keys:
                try:
                    key = raw.decode() if isinstance(raw, bytes) else str(raw)
                except UnicodeDecodeError:
                    continue  # not a name a KeyPrefix (a str) can hold
                name = queue_name_of(key)
                if name is not None:
                    found.add(name)
            if int(cursor) == 0:
                break
            if steps >= SCAN_STEPS or len(found) >= MAX_QUEUES:
                truncated = True
                break
    names = sorted(found)
    if len(names) > MAX_QUEUES:
        names, truncated = names[:MAX_QUEUES], True
    return names, truncated


def preview(data: bytes | None, size: int | None = None) -> dict[str, Any]:
    """A safe, bounded description of an item's data, for display as text (never markup).

    UTF-8 text without control characters (other than tab and newlines) is shown as text;
    anything else as hex. The page inserts the result as text, so nothing in it is executed.

    Args:
        data: The item's data (or its first bytes, as a listing with ``preview_bytes`` returns
            them), or None for an id whose data key is gone.
        size: The length of the whole data, when ``data`` may be a part of it; by default the
            length of ``data``.

    Returns:
        ``{"kind": "text"|"hex"|"missing", "text": str, "size": int, "truncated": bool}``.
    """
    if data is None:
        return {"kind": "missing", "text": "", "size": 0, "truncated": False}
    size = len(data) if size is None else size
    head = data[:PREVIEW_BYTES]
    truncated = size > len(head)
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as err:
        # A multi-byte character cut at the bound is still text.
        if truncated and err.start >= len(head) - 3 and err.reason == "unexpected end of data":
            text = head[: err.start].decode("utf-8")
        else:
            text = None
    if text is not None and all(ch.isprintable() or ch in "\t\n\r" for ch in text):
        return {"kind": "text", "text": text, "size": size, "truncated": truncated}
    return {"kind": "hex", "text": head.hex(" "), "size": size, "truncated": truncated}


def uuid7_time(item_id: str) -> float | None:
    """The creation time held in a UUIDv7 id (the library's default ids), or None.

    Args:
        item_id: An item id.

    Returns:
        Seconds since the epoch, or None when the id is not a UUIDv7 (32 hex digits, with or
        without dashes, version 7).
    """
    digits = item_id.replace("-", "")
    if len(digits) != 32 or digits[12] != "7":
        return None
    try:
        return int(digits[:12], 16) / 1000
    except ValueError:
        return None


def split_reason(reason: str) -> tuple[str, str]:
    """Split a failure reason into its first line and the traceback after it (may be empty)."""
    first, _, rest = reason.partition("\n")
    return first, rest


def dead_row(dead: DeadLetter) -> dict[str, Any]:
    """A dead letter as a JSON-ready dict."""
    reason, traceback = split_reason(dead.reason)
    return {
        "id": dead.id,
        "data": preview(dead.data, dead.size),
        "deliveries": dead.deliveries,
        "reason": reason,
        "traceback": traceback,
        "died_at": dead.died_at,
    }


async def queue_summary(db: AsyncRedis, name: str, now: float) -> dict[str, Any]:
    """One queue's counts (``stats``) and the age of its next waiting item.

    Args:
        db: The Redis client.
        name: The queue's name.
        now: The current time (seconds since the epoch).

    Returns:
        The counts of :class:`QueueStats`, plus ``oldest_age``: seconds since the next item to
        be leased was made, when its id is a UUIDv7 (the library's default ids), else None.
    """
    queue = AsyncWorkQueue(KeyPrefix(name))
    stats = await queue.stats(db)
    row: dict[str, Any] = {"name": name, **asdict(stats), "oldest_age": None}
    if stats.queued:
        head = await queue.peek(db, 0, 1, preview_bytes=0)  # its id only: no data is read
        made = uuid7_time(head[0].id) if head else None
        if made is not None:
            row["oldest_age"] = max(0.0, now - made)
    return row


async def queue_detail(db: AsyncRedis, name: str) -> dict[str, Any]:
    """One queue's waiting items, pending leases, dead letters and live workers (a page each).

    Args:
        db: The Redis client.
        name: The queue's name.

    Returns:
        A JSON-ready dict with ``waiting``, ``pending``, ``dead``, ``dead_total`` and ``workers``.
    """
    queue = AsyncWorkQueue(KeyPrefix(name))
    waiting = await queue.peek(db, 0, PAGE, preview_bytes=PREVIEW_BYTES)
    pending = await queue.pending(db, 0, PAGE)
    dead = await queue.dead_letters(db, 0, PAGE, preview_bytes=PREVIEW_BYTES)
    workers = await alive_workers(db, queue)
    return {
        "name": name,
        "waiting": [
            {"position": q.position, "id": q.id, "data": preview(q.data, q.size)} for q in waiting
        ],
        "pending": [
            {
                "id": p.id,
                "deliveries": p.deliveries,
                "leased_at": p.leased_at,
                "lease_left": p.lease_left,
                "expired": p.expired,
            }
            for p in pending
        ],
        "dead": [dead_row(d) for d in dead],
        "dead_total": await queue.dead_count(db),
        "workers": [w.as_dict() for w in workers],
    }


async def wrong_keys(db: AsyncRedis, name: str) -> list[dict[str, str]]:
    """The fixed keys of queue ``name`` that hold another Redis type than the queue keeps there.

    One ``TYPE`` per fixed key, sent in one round trip.

    Args:
        db: The Redis client.
        name: The queue's name.

    Returns:
        ``{"key": ..., "found": ..., "expected": ...}`` for each, in the layout's order.
    """
    from ..cli import KEY_TYPES  # noqa: PLC0415 (the one table of the fixed keys' types)

    keys = QueueKeys(KeyPrefix(name))
    named = [(getattr(keys, attr), kind) for attr, kind in KEY_TYPES.items()]
    async with db.pipeline(transaction=False) as pipe:
        for key, _ in named:
            pipe.type(key)
        found = await pipe.execute()
    out = []
    for (key, kind), held in zip(named, found, strict=True):
        text = held.decode() if isinstance(held, bytes) else str(held)
        if text not in ("none", kind):
            out.append({"key": key, "found": text, "expected": kind})
    return out


async def broken(db: AsyncRedis, name: str, err: Exception) -> dict[str, Any]:
    """Why queue ``name`` cannot be read, for its row: the keys of the wrong type, if any.

    Args:
        db: The Redis client.
        name: The queue's name.
        err: The error its read raised (a wrong key type, a refused command...).

    Returns:
        ``{"name": ..., "broken": message, "wrong_keys": [...]}``.
    """
    found: list[dict[str, str]] = []
    if isinstance(err, WrongKeyTypeError):
        with contextlib.suppress(redis.ResponseError):  # TYPE refused (an ACL): say less
            found = await wrong_keys(db, name)
    if found:
        message = "; ".join(
            f"key {k['key']!r} holds a {k['found']}, where the queue keeps a {k['expected']}"
            for k in found
        )
        message += ": another program uses that name (rename or delete the key)"
    else:
        message = f"cannot read this queue: {err}"
    return {"name": name, "broken": message, "wrong_keys": found}


@dataclass
class Samples:
    """The counts of each queue over time, kept in memory (a bounded ring per queue).

    Args:
        keep: Samples kept per queue.
    """

    keep: int = 300
    rings: dict[str, deque[tuple[float, dict[str, int]]]] = field(default_factory=dict)

    def add(self, name: str, at: float, counts: dict[str, Any], min_gap: float = 0.0) -> None:
        """Record one queue's counts at time ``at``.

        Args:
            name: The queue.
            at: When the counts were read.
            counts: The counts (``queued``, ``leased`` and ``dead`` are kept).
            min_gap: Skip the sample when the last one is less than this many seconds older
                (many open pages then do not shorten the time the ring covers).
        """
        ring = self.rings.setdefault(name, deque(maxlen=self.keep))
        if ring and at - ring[-1][0] < min_gap:
            return
        ring.append((at, {k: int(counts[k]) for k in ("queued", "leased", "dead")}))

    def history(self, name: str) -> list[dict[str, float]]:
        """A queue's samples, oldest first, as ``{"t": ..., "queued": ..., ...}`` dicts."""
        return [{"t": at, **counts} for at, counts in self.rings.get(name, ())]

    def rates(self, name: str, window: float = 60.0) -> dict[str, float | None]:
        """Net change per second of the queued and dead counts over the last ``window`` s.

        Returns:
            ``{"queued": ..., "dead": ...}``, each None until two samples span some time.
        """
        ring = self.rings.get(name)
        if not ring or len(ring) < 2:
            return {"queued": None, "dead": None}
        last_at, last = ring[-1]
        first_at, first = ring[0]
        for at, counts in ring:
            if at >= last_at - window:
                first_at, first = at, counts
                break
        span = last_at - first_at
        if span <= 0:
            return {"queued": None, "dead": None}
        return {k: (last[k] - first[k]) / span for k in ("queued", "dead")}

    def forget_except(self, names: Iterable[str]) -> None:
        """Drop the samples of queues no longer shown."""
        keep = set(names)
        for name in list(self.rings):
            if name not in keep:
                del self.rings[name]


def now() -> float:
    """The wall-clock time, in seconds since the epoch."""
    return time.time()

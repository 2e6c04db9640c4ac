"""What the dashboard reads from Redis: queue discovery, counts, samples, safe previews.

Everything here talks to a ``redis.asyncio`` client through :class:`AsyncWorkQueue`, so the
dashboard reads exactly what the library's own inspection methods return.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import redis
from redis.asyncio import Redis as AsyncRedis

from ..aio import AsyncWorkQueue
from ..calls import Steps
from ..errors import InvalidArgumentError, WrongKeyTypeError
from ..health import alive_workers
from ..keyprefix import KeyPrefix, QueueKeys, check_queue_name
from ..ops import DeadLetter
from ..ops import events as events_ops
from ..ops.jobs import ItemState, parse_state, state_call
from ..ops.schedules import Schedule, listed, schedule_list_call
from ..results import QueueStats
from ..transport import arun
from ..validation import check_item_id

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
#: The queue's counters sampled for the charts of events per second.
COUNTERS = ("added", "completed", "failed")


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
    counters = await queue.counts(db)  # one HGETALL of a hash of seven fields
    row: dict[str, Any] = {"name": name, **asdict(stats), "oldest_age": None}
    row["counters"] = {k: getattr(counters, k) for k in COUNTERS}
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
            counts: The counts (``queued``, ``leased`` and ``dead`` are kept, and the
                counters of ``counters``: ``added``, ``completed``, ``failed``).
            min_gap: Skip the sample when the last one is less than this many seconds older
                (many open pages then do not shorten the time the ring covers).
        """
        ring = self.rings.setdefault(name, deque(maxlen=self.keep))
        if ring and at - ring[-1][0] < min_gap:
            return
        kept = {k: int(counts[k]) for k in ("queued", "leased", "dead")}
        kept.update({k: int(v) for k, v in (counts.get("counters") or {}).items()})
        ring.append((at, kept))

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


# The console: tabs of one queue, paged; one job; workers across queues -----------------------

#: The tabs of a queue, each a listing read one page at a time.
TABS = ("waiting", "leased", "delayed", "dead")
#: Bytes of a job's data shown on its page at most (the rest is a download).
JOB_PREVIEW_BYTES = 4096
#: Bytes of a job's reason read at most: a longer one is cut (the whole is in the download).
JOB_REASON_BYTES = 16384
#: The newest entries of a queue's event stream a job's page looks through for that job's events.
JOB_EVENTS_SCAN = 1000
#: A job's events shown at most (its newest).
JOB_EVENTS_SHOWN = 20
#: An event id as the live feed takes it (``since``).
EVENT_ID = re.compile(r"\d{1,20}(-\d{1,20})?")
#: The longest wait of one read of the live feed, in seconds (the client's socket timeout bounds
#: it further).
LIVE_WAIT_SECS = 4.0
#: The highest page number asked for that is still read (a bound on the index, not the reads).
MAX_PAGE = 10**7


def page_bounds(page: int, total: int, per_page: int = PAGE) -> tuple[int, int, int]:
    """The page actually shown, and its first and last positions (1-based, inclusive).

    A page past the end shows the last page; an empty listing shows page 1 as ``0-0``.

    Args:
        page: The page asked for (1 is the first).
        total: How many entries the listing holds.
        per_page: Entries a page.

    Returns:
        ``(page, first, last)``, e.g. ``(2, 21, 40)``.
    """
    pages = max(1, -(-total // per_page))
    page = min(max(1, page), pages)
    if total == 0:
        return 1, 0, 0
    first = (page - 1) * per_page + 1
    return page, first, min(first + per_page - 1, total)


async def queue_tab(db: AsyncRedis, name: str, tab: str, page: int) -> dict[str, Any]:
    """One page of one tab of a queue, with the queue's counts: a bounded read of Redis.

    The counts come from ``stats``; the page from ``peek``, ``pending``, ``delayed`` or
    ``dead_letters`` with ``start``/``count`` and a preview bound, so a refresh reads at most
    :data:`PAGE` entries and :data:`PREVIEW_BYTES` of each item's data, whatever the queue's
    length and the items' sizes.

    Args:
        db: The Redis client.
        name: The queue's name.
        tab: One of :data:`TABS`.
        page: The page asked for (1 is the first).

    Returns:
        A JSON-ready dict: ``name``, ``tab``, ``page``, ``pages``, ``first``, ``last``,
        ``total``, ``counts``, ``rows``, ``schedules`` and ``groups`` (see
        :func:`groups_view`).
    """
    queue = AsyncWorkQueue(KeyPrefix(name))
    stats = await queue.stats(db, top_groups=GROUPS_SHOWN)
    totals = {
        "waiting": stats.queued,
        "leased": stats.leased + stats.expired,
        "delayed": stats.delayed,
        "dead": stats.dead,
    }
    total = totals[tab]
    page, first, last = page_bounds(page, total)
    start, count = max(first - 1, 0), PAGE
    rows: list[dict[str, Any]] = []
    if total:
        if tab == "waiting":
            found = await queue.peek(db, start, count, preview_bytes=PREVIEW_BYTES)
            rows = [
                {"position": q.position, "id": q.id, "data": preview(q.data, q.size)} for q in found
            ]
        elif tab == "leased":
            leases = await queue.pending(db, start, count)
            rows = [
                {
                    "position": start + n,
                    "id": p.id,
                    "deliveries": p.deliveries,
                    "leased_at": p.leased_at,
                    "lease_left": p.lease_left,
                    "expired": p.expired,
                    "worker": None,  # a lease does not record its worker
                }
                for n, p in enumerate(leases)
            ]
        elif tab == "delayed":
            held = await queue.delayed(db, start, count, preview_bytes=PREVIEW_BYTES)
            rows = [
                {
                    "position": d.position,
                    "id": d.id,
                    "due_at": d.due_at,
                    "data": preview(d.data, d.size),
                }
                for d in held
            ]
        else:
            dead = await queue.dead_letters(db, start, count, preview_bytes=PREVIEW_BYTES)
            rows = [{"position": start + n, **dead_row(d)} for n, d in enumerate(dead)]
    if rows:
        last = first + len(rows) - 1  # the listing may have changed since the counts
    pages = max(1, -(-total // PAGE))
    return {
        "name": name,
        "tab": tab,
        "page": page,
        "pages": pages,
        "per_page": PAGE,
        "first": first if rows else 0,
        "last": last if rows else 0,
        "total": total,
        "counts": {k: v for k, v in asdict(stats).items() if k != "top_groups"},
        "rows": rows,
        "schedules": await queue_schedules(db, name),
        "groups": groups_view(stats),
    }


#: Groups of a queue shown at most: those with the most items waiting.
GROUPS_SHOWN = 20


def groups_view(stats: QueueStats) -> dict[str, Any] | None:
    """A queue's fair groups as its page shows them; None for a queue without groups.

    The groups come from ``stats(top_groups=GROUPS_SHOWN)``: the :data:`GROUPS_SHOWN` groups
    with the most items waiting, read from the ranking the adds and leases keep
    (``<prefix>:groups:backlog``, as the metrics read it), never a scan of every group.

    Args:
        stats: The queue's counts, read with ``top_groups``.

    Returns:
        None when no group has items waiting and no group concurrency is set; else ``total``
        (groups with items waiting), ``rest`` (those of them not shown), ``grouped`` (items
        waiting on every group's list), ``cap`` (the group concurrency, or None) and ``rows``:
        ``name``, ``ready``, ``in_flight`` and ``paused`` of each group shown, most waiting
        first.
    """
    if not stats.groups_waiting and not stats.grouped and stats.group_concurrency is None:
        return None
    rows = [
        {"name": name, "ready": g.ready, "in_flight": g.in_flight, "paused": g.paused}
        for name, g in stats.top_groups.items()
    ]
    return {
        "total": stats.groups_waiting,
        "rest": max(stats.groups_waiting - len(rows), 0),
        "grouped": stats.grouped,
        "cap": stats.group_concurrency,
        "rows": rows,
    }


#: Schedules of a queue shown at most (the soonest due; paused ones come first, as listed).
SCHEDULES_SHOWN = 50


def _schedule_page(keys: QueueKeys, count: int) -> Steps[list[Schedule]]:
    flat = yield schedule_list_call(keys, 0, count - 1)
    return listed(flat)


async def queue_schedules(db: AsyncRedis, name: str) -> dict[str, Any]:
    """The first :data:`SCHEDULES_SHOWN` schedules of a queue, and how many it has.

    One ``ZCARD`` of ``<P>:schedules:due``; only when it is not empty, one script call
    (``schedule_list``) reading that many schedules at most, in the order
    :meth:`~redis_work_queue.AsyncWorkQueue.schedules` lists them (paused ones first, then by
    next due time, then those with none left).

    Args:
        db: The Redis client.
        name: The queue's name.

    Returns:
        ``{"total": N, "rows": [...]}``: each row ``name``, ``cron``, ``every`` (seconds),
        ``tz``, ``next_due`` (seconds since the epoch, or None), ``state`` (``"active"``,
        ``"paused"`` or ``"ended"``) and ``last_id``.
    """
    keys = QueueKeys(KeyPrefix(name))
    total = int(await db.zcard(keys.schedules_due))
    if not total:
        return {"total": 0, "rows": []}
    found = await arun(db, _schedule_page(keys, SCHEDULES_SHOWN))
    rows = [
        {
            "name": s.name,
            "cron": s.cron,
            "every": s.every,
            "tz": s.tz,
            "next_due": s.next_due,
            "state": "paused" if s.paused else ("ended" if s.next_due is None else "active"),
            "last_id": s.last_id,
        }
        for s in found
    ]
    return {"total": total, "rows": rows}


def pretty_json(data: bytes | None, whole: bool) -> str | None:
    """The data pretty-printed, when it is whole and parses as a JSON object or array."""
    if data is None or not whole:
        return None
    stripped = data.lstrip()
    if stripped[:1] not in (b"{", b"["):
        return None
    try:
        import json  # noqa: PLC0415 (only for a job's page)

        return json.dumps(json.loads(data), indent=2, ensure_ascii=False, sort_keys=False)
    except (ValueError, UnicodeDecodeError):
        return None


def _job_state(keys: QueueKeys, item_id: str) -> Steps[tuple[ItemState, int]]:
    """The job's state with a kept result's first :data:`JOB_PREVIEW_BYTES`, and its length."""
    (row,) = yield state_call(keys, JOB_PREVIEW_BYTES, item_id)
    return parse_state(item_id, row), int(row[9])


def _text(raw: Any) -> str | None:
    if raw is None:
        return None
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


async def job_detail(db: AsyncRedis, name: str, item_id: str) -> dict[str, Any]:
    """One job's page: where it is, its deliveries, reason and a bounded preview of its data.

    Its state comes from ``state`` (job control: one script call). Its data and reasons take one
    round trip of bounded reads (``STRLEN``/``GETRANGE`` of the data, the reasons' lengths by
    ``HSTRLEN``, its place in the dead set), and a second for a reason of at most
    :data:`JOB_REASON_BYTES` and a dead letter's data when it is small enough to show whole.

    Args:
        db: The Redis client.
        name: The queue's name.
        item_id: The job's id.

    Returns:
        A JSON-ready dict with ``found``, ``state`` (``ItemState.state``: ``queued``,
        ``delayed``, ``leased``, ``expired``, ``dead``, ``completed`` or ``gone``),
        ``has_data``, ``data`` (a preview), ``json`` (pretty-printed when the whole data is
        JSON), ``deliveries``, ``reason``, ``traceback``, ``lease_left``, ``leased_at``,
        ``due_at`` and ``dead`` (the dead letter of that id, if any).
    """
    keys = QueueKeys(KeyPrefix(name))
    item, dead_key = keys.item(item_id), keys.dead_item(item_id)
    async with db.pipeline(transaction=False) as pipe:
        pipe.exists(item)
        pipe.strlen(item)
        pipe.getrange(item, 0, JOB_PREVIEW_BYTES - 1)
        pipe.hstrlen(keys.reasons, item_id)
        pipe.zscore(keys.dead, item_id)
        pipe.hstrlen(dead_key, "data")
        pipe.hmget(dead_key, "deliveries")
        pipe.hstrlen(dead_key, "reason")
        (
            exists,
            size,
            head,
            reason_len,
            died,
            dead_size,
            (dead_deliveries,),
            dead_reason_len,
        ) = await pipe.execute()
    # The reasons and a small dead letter's data: each read whole only when within its bound.
    read_reason = 0 < int(reason_len) <= JOB_REASON_BYTES
    read_dead_reason = 0 < int(dead_reason_len) <= JOB_REASON_BYTES
    read_dead_data = died is not None and int(dead_size) <= JOB_PREVIEW_BYTES
    reason = dead_reason = dead_data = None
    if read_reason or read_dead_reason or read_dead_data:
        async with db.pipeline(transaction=False) as pipe:
            if read_reason:
                pipe.hget(keys.reasons, item_id)
            if read_dead_reason:
                pipe.hget(dead_key, "reason")
            if read_dead_data:
                pipe.hget(dead_key, "data")
            second = list(await pipe.execute())
        reason = second.pop(0) if read_reason else None
        dead_reason = second.pop(0) if read_dead_reason else None
        dead_data = second.pop(0) if read_dead_data else None

    # Where the job is, as the library's job control reads it (one script call), with at most
    # JOB_PREVIEW_BYTES of a kept result: a large result is shown cut, with its size.
    found, result_size = await arun(db, _job_state(keys, check_item_id(item_id)))
    whole = exists and int(size) <= JOB_PREVIEW_BYTES
    result = found.result
    first, traceback = split_reason(_text(reason) or "")
    out: dict[str, Any] = {
        "name": name,
        "id": item_id,
        "found": found.state != "gone",
        "state": found.state,
        "has_data": bool(exists),
        "data": preview_of(head if exists else None, int(size), JOB_PREVIEW_BYTES),
        "json": pretty_json(head if exists else None, bool(whole)),
        "deliveries": found.deliveries,
        "reason": first or None,
        "traceback": traceback,
        "reason_cut": int(reason_len) > JOB_REASON_BYTES,
        "lease_left": found.lease_left,
        "leased_at": found.leased_at,
        "due_at": found.due_at,
        "progress": found.progress,
        "result": None if result is None else preview_of(result, result_size, JOB_PREVIEW_BYTES),
        "events": await job_events(db, keys, item_id),
        "dead": None,
    }
    if died is not None:
        dead_first, dead_tb = split_reason(_text(dead_reason) or "")
        out["dead"] = {
            "died_at": float(died) / 1000,  # the dead set's score: ms since the epoch
            "deliveries": int(dead_deliveries or 0),
            "reason": dead_first,
            "traceback": dead_tb,
            "reason_cut": int(dead_reason_len) > JOB_REASON_BYTES,
            "data": preview_of(
                dead_data, int(dead_size), JOB_PREVIEW_BYTES, shown=dead_data is not None
            ),
            "json": pretty_json(dead_data, dead_data is not None),
        }
    return out


def preview_of(head: bytes | None, size: int, bound: int, shown: bool = True) -> dict[str, Any]:
    """:func:`preview` of up to ``bound`` first bytes of a value of ``size`` bytes.

    ``shown=False`` describes a value that was not read at all (only its size is known).
    """
    if not shown:
        return {"kind": "hidden", "text": "", "size": size, "truncated": True}
    if head is None:
        return preview(None)
    described = preview(head[:bound], size)
    if described["kind"] == "text" and len(head) > PREVIEW_BYTES:
        # preview() cuts at PREVIEW_BYTES: a job's page shows up to ``bound``.
        text = head[:bound].decode("utf-8", "replace")
        described = {**described, "text": text}
    return described


async def workers_everywhere(db: AsyncRedis, names: Iterable[str]) -> list[dict[str, Any]]:
    """The live workers of every queue shown, each once, with the queues it works on.

    Args:
        db: The Redis client.
        names: The queues shown.

    Returns:
        One JSON-ready row per worker (``WorkerInfo.as_dict``, with ``beat_age``), by id.
    """
    seen: dict[str, dict[str, Any]] = {}
    at = now()
    for name in names:
        for worker in await alive_workers(db, AsyncWorkQueue(KeyPrefix(name))):
            row = worker.as_dict()
            row["beat_age"] = None if worker.beat is None else max(0.0, at - worker.beat)
            known = seen.get(worker.id)
            if known is None:
                row["seen_in"] = [name]
                seen[worker.id] = row
            else:
                known["seen_in"].append(name)
    return [seen[k] for k in sorted(seen)]


def quantile_bound(counts: list[int], q: float) -> str | None:
    """The upper bound of the histogram bucket that holds quantile ``q`` (None: no jobs).

    Args:
        counts: Per-bucket counts, in :data:`~redis_work_queue.durations.BOUNDS` order.
        q: The quantile, 0 to 1.

    Returns:
        The bucket's bound as the histogram names it (``"0.25"``, ``"+Inf"``), or None.
    """
    from ..durations import BOUNDS  # noqa: PLC0415 (the histogram's buckets)

    total = sum(counts)
    if total <= 0:
        return None
    seen = 0
    for bound, count in zip(BOUNDS, counts, strict=True):
        seen += count
        if seen >= q * total:
            return bound
    return BOUNDS[-1]


async def queue_durations(db: AsyncRedis, names: Iterable[str]) -> list[dict[str, Any]]:
    """The job durations of each queue shown, from the histogram its workers keep.

    One metrics read per queue (``read_steps``: the counts and the ``<P>:durations`` hash of
    2 x 14 buckets), so a bounded read whatever the number of jobs.

    Args:
        db: The Redis client.
        names: The queues shown.

    Returns:
        One row per queue and outcome that has jobs: ``queue``, ``outcome`` (``completed``,
        ``failed``), ``jobs``, ``mean`` (seconds) and ``p50``/``p95`` (the upper bound of the
        bucket that holds them, in seconds, as text: ``"0.25"``, ``"+Inf"``).
    """
    from ..ops.metrics import read_steps  # noqa: PLC0415 (the workers page only)

    rows = []
    for name in names:
        found = await arun(db, read_steps(AsyncWorkQueue(KeyPrefix(name)).ops))
        for outcome, (counts, total_secs) in sorted(found.durations.items()):
            jobs = sum(counts)
            if jobs:
                rows.append(
                    {
                        "queue": name,
                        "outcome": outcome,
                        "jobs": jobs,
                        "mean": total_secs / jobs,
                        "p50": quantile_bound(counts, 0.5),
                        "p95": quantile_bound(counts, 0.95),
                    }
                )
    return rows


def _event_row(name: str, event: events_ops.Event) -> dict[str, Any]:
    return {"queue": name, **asdict(event)}


async def _has_stream(db: AsyncRedis, keys: QueueKeys) -> bool:
    """Whether the queue keeps an event stream (made with ``events=True``)."""
    return _text(await db.type(keys.events)) == "stream"


async def job_events(db: AsyncRedis, keys: QueueKeys, item_id: str) -> list[dict[str, Any]] | None:
    """A job's newest events, oldest first; None when its queue keeps no event stream.

    At most :data:`JOB_EVENTS_SHOWN`, found among the newest :data:`JOB_EVENTS_SCAN` entries of
    the stream (one bounded XREVRANGE).
    """
    if not await _has_stream(db, keys):
        return None
    entries = await db.xrevrange(keys.events, "+", "-", count=JOB_EVENTS_SCAN)
    found = [events_ops.parse_event(entry_id, fields) for entry_id, fields in entries or ()]
    mine = [e for e in found if e.id == item_id][:JOB_EVENTS_SHOWN]
    return [_event_row(keys.prefix, e) for e in reversed(mine)]


async def live_events(db: AsyncRedis, name: str, since: str) -> dict[str, Any]:
    """The live feed of one queue: the events after ``since``, waiting a bounded time for one.

    One XREAD BLOCK of at most :data:`LIVE_WAIT_SECS` (and the client's socket timeout).

    Args:
        db: The Redis client.
        name: The queue's name.
        since: An event id, or ``"$"`` for the new events only.

    Returns:
        ``live`` (False: the queue keeps no event stream, nothing was waited for; the page then
        polls), ``since`` (the id to read after next) and ``events`` (at most one page).
    """
    keys = QueueKeys(KeyPrefix(name))
    if not await _has_stream(db, keys):
        return {"live": False, "since": since, "events": []}
    ops = AsyncWorkQueue(KeyPrefix(name)).ops
    after, found = await arun(db, events_ops.read_events(ops, since, LIVE_WAIT_SECS))
    return {"live": True, "since": after, "events": [_event_row(name, e) for e in found]}


async def acting_queue(db: AsyncRedis, name: str) -> AsyncWorkQueue:
    """The queue an action changes.

    With events on when its ``P:events`` holds a stream, so that the change is on the stream too
    (see :func:`~redis_work_queue.ops.events.found_cap`).
    """
    keys = QueueKeys(KeyPrefix(name))
    async with db.pipeline(transaction=False) as pipe:
        pipe.type(keys.events)
        pipe.xlen(keys.events)
        kind, length = await pipe.execute(raise_on_error=False)
    cap = events_ops.found_cap(kind, length if isinstance(length, int) else 0)
    return AsyncWorkQueue(
        KeyPrefix(name),
        events=cap is not None,
        events_maxlen=cap or events_ops.EVENTS_MAXLEN,
    )
